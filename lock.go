package baton

import (
	"context"
	"errors"
	"time"
)

// Lock is a held lock. Its methods are safe for concurrent use; Unlock
// releases it once, and every later call returns an error.
type Lock struct {
	n        *name
	h        *hold
	token    uint64
	acquired time.Time
	how      How
	given    bool         // guarded by the session mutex: returned to a caller, so the Observer hears of its end
	sig      *lockSignals // guarded by the session mutex; made by the first Done or Context: most locks never need one

	err error // guarded by the session mutex: nil while held, then why it ended
}

// lockSignals are what Done and Context return, made on first use.
type lockSignals struct {
	ctx    context.Context         // made by Context
	cancel context.CancelCauseFunc // made with ctx
	done   chan struct{}           // made by Done, closed by name.end
}

// signals returns l.sig, made if new; the session mutex is held.
func (l *Lock) signals() *lockSignals {
	if l.sig == nil {
		l.sig = &lockSignals{}
	}
	return l.sig
}

// give marks l as returned to its caller and counts it; the session
// mutex is held. Locks handed to a waiter that left first were never
// acquired as far as callers, Stats and the Observer are concerned.
func (l *Lock) give() {
	l.given = true
	st := l.n.r.stats
	st.acquired.Add(1)
	switch l.how {
	case Handoff:
		st.handoffs.Add(1)
	case Granted:
		st.granted.Add(1)
	case Cached:
		st.cached.Add(1)
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
func (l *Lock) Name() string { return l.n.id.name }

// Token returns the fencing token: it rises on every acquisition of the name
// by any client, so a storage layer that remembers the highest token it has
// seen can refuse writes from a holder that lost the lock while paused.
func (l *Lock) Token() uint64 { return l.token }

// Done returns a channel that is closed once the lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	s := l.n.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.sig == nil || l.sig.done == nil {
		// Made on first use: most locks never need one.
		if l.err != nil {
			return closedChan
		}
		l.signals().done = make(chan struct{})
	}
	return l.sig.done
}

// closedChan is the Done channel of a lock that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Context returns a context cancelled once the lock is released or lost; its
// cause is the error Err reports.
func (l *Lock) Context() context.Context {
	s := l.n.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.sig == nil || l.sig.ctx == nil {
		// Made on first use: most locks never need one.
		sig := l.signals()
		sig.ctx, sig.cancel = context.WithCancelCause(context.WithValue(context.Background(), lockKey{}, l))
		if l.err != nil {
			sig.cancel(l.err)
		}
	}
	return l.sig.ctx
}

// Err returns nil while the lock is held, an error matching ErrLockLost once
// it was lost, and ErrUnlocked or ErrClosed once it was released.
func (l *Lock) Err() error {
	s := l.n.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return l.err
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
	s, n := l.n.s, l.n
	now := time.Now()
	s.mu.Lock()
	e, err := n.unlock(l, now, true)
	req := s.afterLocked(n, &e)
	s.mu.Unlock()
	s.signal(&e)
	switch {
	case errors.Is(err, ErrLockLost):
		return err
	case err != nil:
		return &opError{n.unlockOp(), err}
	case req != nil:
		if err = s.run(ctx, n, req); errors.Is(err, ErrLockLost) {
			s.c.stats.lost.Add(1) // a loss its caller is told of (Stats.Lost)
		}
	}
	if obs := s.c.obs; obs != nil || s.c.log != nil {
		ev := Event{Kind: Released, Primitive: n.id.kind.primitive(), Name: n.id.name, Token: l.token, Held: now.Sub(l.acquired)}
		if errors.Is(err, ErrLockLost) {
			ev.Kind, ev.Err = Lost, err
		}
		s.c.report(ctx, ev)
	}
	return err
}
