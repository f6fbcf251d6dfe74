package baton

import (
	"context"
	"errors"
	"time"

	"github.com/batonlock/baton/internal/machine"
)

// Lock is a held lock. Its methods are safe for concurrent use; Unlock
// releases it once, and every later call returns an error.
type Lock struct {
	m   *machine.Lock
	s   *Session
	sig *lockSignals // guarded by the session mutex; made by the first Done or Context: most locks never need one
}

// lockSignals are what Done and Context return, made on first use.
type lockSignals struct {
	ctx    context.Context         // made by Context
	cancel context.CancelCauseFunc // made with ctx
	done   chan struct{}           // made by Done, closed by endLocked
}

// endLocked signals that the lock ended with err: Done closes, Context is
// cancelled with err as its cause; the session mutex is held (no user code
// runs: context.AfterFunc functions run in goroutines of their own).
func (l *Lock) endLocked(err error) {
	if sig := l.sig; sig != nil {
		if sig.done != nil {
			select {
			case <-sig.done:
			default:
				close(sig.done)
			}
		}
		if sig.cancel != nil {
			sig.cancel(err)
		}
	}
}

type lockKey struct{}

// FromContext returns the Lock whose Context ctx is or derives from, as in
// the fn passed to Do, for its fencing token.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.m.Name.ID.Name }

// Token returns the fencing token: it rises on every acquisition of the name
// by any client, so a storage layer that remembers the highest token it has
// seen can refuse writes from a holder that lost the lock while paused.
func (l *Lock) Token() uint64 { return l.m.Token }

// checkLocked applies the passing of time to the lock before a caller
// learns of its state: a hold whose lease deadline has passed is lost at
// the moment anyone asks, whether or not a timer has fired (the process
// may just have resumed from a stop). The session mutex is held; the
// returned Ready is the caller's to carry out once unlocked.
func (l *Lock) checkLocked() machine.Ready {
	l.s.m.Check(l.m, time.Now())
	return l.s.readyLocked()
}

// Done returns a channel that is closed once the lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	s := l.s
	s.mu.Lock()
	r := l.checkLocked()
	if l.sig == nil || l.sig.done == nil {
		// Made on first use: most locks never need one.
		if l.m.Err != nil {
			s.mu.Unlock()
			s.act(r)
			return closedChan
		}
		l.signals().done = make(chan struct{})
	}
	d := l.sig.done
	s.mu.Unlock()
	s.act(r)
	return d
}

// signals returns l.sig, made if new; the session mutex is held.
func (l *Lock) signals() *lockSignals {
	if l.sig == nil {
		l.sig = &lockSignals{}
	}
	return l.sig
}

// closedChan is the Done channel of a lock that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Context returns a context cancelled once the lock is released or lost; its
// cause is the error Err reports. Its Err, like the Lock's, applies the
// passing of time first: past the lock's lease deadline it reports the
// loss even before any timer fired.
func (l *Lock) Context() context.Context {
	s := l.s
	s.mu.Lock()
	r := l.checkLocked()
	if l.sig == nil || l.sig.ctx == nil {
		// Made on first use: most locks never need one.
		sig := l.signals()
		ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), lockKey{}, l))
		sig.ctx, sig.cancel = &lockContext{Context: ctx, l: l}, cancel
		if l.m.Err != nil {
			sig.cancel(l.m.Err)
		}
	}
	ctx := l.sig.ctx
	s.mu.Unlock()
	s.act(r)
	return ctx
}

// lockContext is a Lock's Context: its Err asks the lock first.
type lockContext struct {
	context.Context
	l *Lock
}

func (c *lockContext) Err() error {
	c.l.Err()
	return c.Context.Err()
}

// Err returns nil while the lock is held, an error matching ErrLockLost once
// it was lost (saying why), and ErrUnlocked or ErrClosed once it was
// released. A hold whose lease deadline has passed is reported lost.
func (l *Lock) Err() error {
	s := l.s
	s.mu.Lock()
	r := l.checkLocked()
	err := l.m.Err
	s.mu.Unlock()
	s.act(r)
	return err
}

// Unlock releases the lock. If the lock was lost, it returns an error
// matching ErrLockLost and touches nothing in Redis; after Unlock or Close it
// returns ErrUnlocked or ErrClosed. The lock counts as released (Done
// closes) as soon as Unlock is called, even if Redis cannot be reached. The
// round trip is bounded by ctx and by the lease (a key that could not be
// released expires with it), with pauses between tries after passing
// failures. A release sent within the lease that reaches Redis only after
// the key expired counts as done: the caller had stopped using the lock.
//
// A lock the session caches (Options.CacheIdle) is kept instead: the first
// such Unlock asks Redis whether the key is still ours and nobody is
// queued, later ones of the same hold return at once, and a loss Redis had
// not told the session of yet (it hears through tracking, or its next
// renewal) is then not reported.
func (l *Lock) Unlock(ctx context.Context) error {
	s := l.s
	now := time.Now()
	var (
		c   *machine.Call
		err error
	)
	s.step(func(now time.Time) { c, err = s.m.Unlock(l.m, now) })
	switch {
	case errors.Is(err, ErrLockLost):
		return err
	case err != nil:
		return &opError{Op: machine.UnlockOp(l.m.Name.ID), Err: err}
	case c != nil:
		err = s.release(ctx, c)
	}
	if obs := s.c.obs; obs != nil || s.c.log != nil {
		ev := Event{Kind: Released, Primitive: primitiveOf(l.m.Name.ID.Kind), Name: l.Name(), Token: l.m.Token, Held: now.Sub(l.m.Acquired)}
		if errors.Is(err, ErrLockLost) {
			ev.Kind, ev.Err = Lost, err
		}
		s.c.report(ctx, ev)
	}
	return err
}

// release makes Unlock's release call c. A plain release (c.MayAbandon) is
// bounded by ctx too: one that rueidis sends after ctx ended is harmless, as
// it compares the owner token, and the machine treats its outcome as
// unknown. One that queues us again or keeps the lock for our waiter or
// cache is never abandoned: a late one would leave Redis with a hold or an
// entry nobody knows, so it goes on in the background when ctx ends.
func (s *Session) release(ctx context.Context, c *machine.Call) error {
	if c.MayAbandon || ctx.Done() == nil {
		_, err := s.exec(ctx, c)
		return err
	}
	var err error
	done := make(chan struct{})
	if !s.c.spawn(func(bg context.Context) {
		defer close(done)
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(bg, cancel)
		defer func() {
			stop()
			cancel()
		}()
		_, err = s.exec(dctx, c)
	}) {
		_, err := s.exec(ctx, c)
		return err
	}
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return &opError{Op: machine.UnlockOp(c.ID), Err: errors.Join(ctx.Err(), errors.New("the release goes on, bounded by the lease"))}
	}
}
