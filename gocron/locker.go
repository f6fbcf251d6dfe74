package batongocron

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
	"github.com/go-co-op/gocron/v2"
)

// Defaults of LockerOptions.
const (
	DefaultPrefix  = "gocron:"
	DefaultMinHold = time.Second
)

// LockerOptions configure a Locker. The zero value selects every default.
type LockerOptions struct {
	// Prefix begins the name of every lock: a run of the job named "report"
	// holds the baton lock "<Prefix>report". Default DefaultPrefix
	// ("gocron:").
	Prefix string

	// MinHold is the shortest time a run keeps its lock, counted from the
	// moment its acquisition was confirmed: a run that ends sooner is
	// released only then (Unlock returns at once; the release happens in
	// the background). It must exceed the splay of the schedulers (how far
	// apart in real time they fire the same run) by LockTimeout, and stay
	// below the job's shortest interval minus the splay, or the next run is
	// skipped on every instance. Default DefaultMinHold (1s).
	MinHold time.Duration

	// LockTimeout bounds each attempt to acquire a lock: an attempt that has
	// no answer from Redis by then fails (the run is skipped on this
	// instance) and a lock it took after all is released when the answer
	// comes. Default MinHold/2; it must be below MinHold.
	LockTimeout time.Duration
}

// fill sets the defaults of zero fields and rejects values out of range,
// naming the field.
func (o *LockerOptions) fill() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	switch {
	case o.MinHold < 0:
		return fmt.Errorf("%w: LockerOptions.MinHold %v is negative", baton.ErrInvalidOptions, o.MinHold)
	case o.MinHold == 0:
		o.MinHold = DefaultMinHold
	}
	switch {
	case o.LockTimeout < 0:
		return fmt.Errorf("%w: LockerOptions.LockTimeout %v is negative", baton.ErrInvalidOptions, o.LockTimeout)
	case o.LockTimeout == 0:
		o.LockTimeout = o.MinHold / 2
	case o.LockTimeout >= o.MinHold:
		return fmt.Errorf("%w: LockerOptions.LockTimeout %v is not below MinHold %v",
			baton.ErrInvalidOptions, o.LockTimeout, o.MinHold)
	}
	return nil
}

// Locker is a gocron.Locker on a baton Client: each run of a job holds the
// lock "<Prefix><job name>" for at least MinHold and until the run ends, and
// an instance that cannot take the lock at once skips the run. See the
// package doc for the guarantee and its limits.
//
// A Locker is safe for concurrent use and may serve several schedulers. The
// zero value is not usable: create one with NewLocker, and Close it after
// the schedulers it serves have shut down and before the Client is closed.
type Locker struct {
	c   *baton.Client
	opt LockerOptions

	mu     sync.Mutex // protects closed and the Add calls of pending
	closed bool

	pending sync.WaitGroup // releases waiting for their MinHold to pass
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker taking its locks in c's default session. It
// fails with an error matching baton.ErrInvalidOptions when an option is out
// of range. The Locker does not own c.
func NewLocker(c *baton.Client, opt LockerOptions) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", baton.ErrInvalidOptions)
	}
	if err := opt.fill(); err != nil {
		return nil, err
	}
	return &Locker{c: c, opt: opt}, nil
}

// Lock makes one attempt (baton's TryLock) to lock the run of the job named
// key, bounded by ctx and LockTimeout; gocron skips the run on this instance
// when it fails. The error matches baton.ErrNotAcquired when another instance
// holds the lock (it runs or recently ran the job), the ctx error when ctx
// ended or LockTimeout passed before the answer (context.DeadlineExceeded),
// and baton.ErrClosed after Close.
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk.mu.Lock()
	closed := lk.closed
	lk.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("batongocron: lock %q: %w", key, baton.ErrClosed)
	}
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, lk.opt.LockTimeout)
	defer cancel()
	l, err := lk.c.TryLock(actx, lk.opt.Prefix+key)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if now.Sub(start) > lk.opt.LockTimeout {
		// The answer came after the deadline but before TryLock noticed:
		// Redis may have granted it after another instance's MinHold, so
		// this instance must not run. Releasing at once is safe: if
		// another instance ran this run, every attempt reaching Redis
		// after this one is late too.
		l.Unlock(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batongocron: lock %q answered after LockTimeout %v: %w",
			key, lk.opt.LockTimeout, context.DeadlineExceeded)
	}
	return &runLock{lk: lk, l: l, until: now.Add(lk.opt.MinHold)}, nil
}

// Close waits until every release delayed by MinHold has been made (at most
// MinHold), and makes later Lock calls fail with baton.ErrClosed. Unlock
// calls after Close release at once. Closing twice is harmless.
func (lk *Locker) Close() error {
	lk.mu.Lock()
	lk.closed = true
	lk.mu.Unlock()
	lk.pending.Wait()
	return nil
}

// runLock is the gocron.Lock of one run.
type runLock struct {
	lk       *Locker
	l        *baton.Lock
	until    time.Time // end of MinHold on the local clock
	unlocked atomic.Bool
}

// Unlock releases the run's lock once MinHold has passed since it was
// acquired: at once if it has, else in the background, returning nil.
// gocron calls it with the job's context, which is cancelled when the
// scheduler stops; the release is bounded by the lock's lease instead.
// It returns an error matching baton.ErrLockLost if the lock was lost
// meanwhile, and baton.ErrUnlocked when called again.
func (r *runLock) Unlock(ctx context.Context) error {
	if r.unlocked.Swap(true) {
		return fmt.Errorf("%w: %q", baton.ErrUnlocked, r.l.Name())
	}
	ctx = context.WithoutCancel(ctx)
	wait := time.Until(r.until)
	if wait <= 0 || r.l.Err() != nil {
		return r.l.Unlock(ctx)
	}
	lk := r.lk
	lk.mu.Lock()
	closed := lk.closed
	if !closed {
		lk.pending.Add(1)
	}
	lk.mu.Unlock()
	if closed {
		return r.l.Unlock(ctx)
	}
	time.AfterFunc(wait, func() {
		defer lk.pending.Done()
		r.l.Unlock(ctx) // a loss is reported by the Client's Observer and Logger
	})
	return nil
}
