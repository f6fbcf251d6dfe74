package baton

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Lock is a held lock. Its methods are safe for concurrent use; Unlock
// releases it once, and every later call returns an error.
type Lock struct {
	s        *Session
	ns       *nameState
	h        *hold
	token    uint64
	acquired time.Time
	ctx      context.Context         // guarded by s.mu; made by Context
	cancel   context.CancelCauseFunc // guarded by s.mu
	done     chan struct{}           // closed by Session.finish when released or lost

	err error // guarded by s.mu: nil while held, then why it ended
}

type lockKey struct{}

// FromContext returns the Lock whose Context ctx is or derives from, as in
// the fn passed to Do, for its fencing token.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.ns.name }

// Token returns the fencing token: it rises on every acquisition of the name
// by any client, so a storage layer that remembers the highest token it has
// seen can refuse writes from a holder that lost the lock while paused.
func (l *Lock) Token() uint64 { return l.token }

// Done returns a channel that is closed once the lock is released or lost.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Context returns a context cancelled once the lock is released or lost; its
// cause is the error Err reports.
func (l *Lock) Context() context.Context {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.ctx == nil {
		// Made on first use: most locks never need one.
		l.ctx, l.cancel = context.WithCancelCause(context.WithValue(context.Background(), lockKey{}, l))
		if l.err != nil {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

// Err returns nil while the lock is held, an error matching ErrLockLost once
// it was lost, and ErrUnlocked or ErrClosed once it was released.
func (l *Lock) Err() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.err
}

// Unlock releases the lock. If the lock was lost, it returns an error
// matching ErrLockLost and touches nothing in Redis; a second Unlock returns
// ErrUnlocked. A release sent within the lease that reaches Redis only after
// the key expired counts as done: the caller had stopped using the lock. The lock counts as released (Done closes) as soon as Unlock
// is called, even if Redis cannot be reached: ctx bounds the round trip, and
// a key that could not be deleted expires within the lease.
func (l *Lock) Unlock(ctx context.Context) error { return l.unlock(ctx, true) }

// unlock is Unlock; linger allows the session to stay queued for the name
// after a contended release (see releaseHold).
func (l *Lock) unlock(ctx context.Context, linger bool) error {
	s, ns, h := l.s, l.ns, l.h
	s.mu.Lock()
	if l.err != nil {
		err := l.err
		s.mu.Unlock()
		if errors.Is(err, ErrLockLost) {
			return err
		}
		return fmt.Errorf("%w: %q", err, truncate(ns.name))
	}
	s.finish(l, ErrUnlocked)
	if ns.held != h {
		s.mu.Unlock()
		return nil
	}
	// Hand the lock to the next goroutine of this session without Redis,
	// at most CohortLimit-1 times in a row and for at most cohortWindow, so
	// queued sessions get a turn soon also when holds are long.
	if len(ns.waiters) > 0 && h.passes+1 < s.c.cohort && time.Since(h.since) < cohortWindow && !h.suspect &&
		!s.closed && time.Until(h.deadline) > s.margin {
		h.passes++
		s.handTo(ns, h, h.passes)
		s.c.stats.handoffs.Add(1)
		s.mu.Unlock()
		return nil
	}
	ns.busy = true
	s.mu.Unlock()
	// Close waits for this release unless it had begun already; then the
	// release races the closing connection, and a key it misses expires
	// with its lease.
	entered := s.c.enter()
	if entered {
		defer s.c.calls.Done()
	}
	var err error
	for {
		err = s.releaseHold(ctx, ns, h, linger)
		s.mu.Lock()
		if err == nil && ns.held == h && h.lock == nil {
			// Redis kept it for our next waiter, who has gone meanwhile.
			s.mu.Unlock()
			continue
		}
		break
	}
	ns.busy = false
	s.leave(ns, s.settled(ns))
	if err != nil && !entered {
		return fmt.Errorf("%w: unlock %q raced Close (%v); the key expires with its lease", ErrClosed, truncate(ns.name), err)
	}
	return err
}

// releaseHold runs the release script for h and applies its result, except
// for the final settling; ns is busy.
func (s *Session) releaseHold(ctx context.Context, ns *nameState, h *hold, linger bool) error {
	s.mu.Lock()
	mode := "0"
	switch {
	case s.closed:
	case len(ns.waiters) > 0:
		mode = "1"
	case h.waited && linger:
		// Contended: this session will likely want the lock again soon.
		// Queue it now at no extra cost; the entry lives until the next
		// renewal tick, which keeps it only if a waiter has come.
		mode = "2"
	}
	if s.c.sharded && (ns.sub == nil || !isClosed(ns.sub.ready)) {
		// Not listening for grants on this name yet: do not queue.
		mode = "0"
	}
	// A contended name is tracked on c.rc, whose writes (NOLOOP) do not
	// wake our own waiters; uncontended releases take the faster c.cc.
	rc := s.c.cc
	if h.waited || mode != "0" {
		rc = s.c.rc
	}
	s.mu.Unlock()
	args := []string{h.owner, s.member, s.leaseMs,
		mode, s.c.via(ns), ns.name, s.lingerMs}
	sent := time.Now()
	first := sent
	res, _ := run(ctx, rc, pipe{}, releaseScript, ns.keys.list(), args)
	vals, _, err := scriptInts(res)
	// Try again after passing failures: a dropped connection (rueidis keeps
	// several, each of which may have been cut) or a slot in migration
	// (TRYAGAIN). A dropped connection loses the reply, not necessarily the
	// call: "not ours" then reads as our own earlier release.
	maybeRan := false
	for try := 1; try <= 5 && err != nil && transient(err) && ctx.Err() == nil; try++ {
		if isRedisErr(err) {
			pause(ctx, time.Duration(try)*20*time.Millisecond)
		} else {
			maybeRan = true
		}
		sent = time.Now()
		res, _ = run(ctx, rc, pipe{}, releaseScript, ns.keys.list(), args)
		vals, _, err = scriptInts(res)
		if err == nil && maybeRan && len(vals) > 0 && vals[0] == -1 {
			vals[0] = 0
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || len(vals) == 0 {
		// Unknown outcome: stop renewing; the key expires within the lease.
		// A waiter of ours that finds the key still ours takes it over.
		ns.held = nil
		ns.recheck = time.Time{}
		if err == nil {
			err = errors.New("empty reply")
		}
		return fmt.Errorf("baton: unlock %q: %w", truncate(ns.name), err)
	}
	switch vals[0] {
	case -1:
		ns.held = nil
		ns.recheck = time.Time{}
		if first.Before(h.deadline) && time.Now().After(h.deadline) {
			// Sent in time, answered after the lease ran out: the key
			// expired while the release was on its way, which is as good
			// as released for the caller, who had stopped using it.
			return nil
		}
		s.c.stats.lost.Add(1)
		return fmt.Errorf("%w: %q expired or was taken over before Unlock", ErrLockLost, truncate(ns.name))
	case 0:
		ns.held = nil
		ns.recheck = time.Time{}
	case 1:
		ns.held = nil
		ns.queued = mode == "1" || len(vals) > 1 && vals[1] == 1
		ns.recheck = time.Time{}
		switch {
		case mode == "1":
			// The grant message wakes our head waiter; the timer is the
			// safety net.
			ns.recheck = time.Now().Add(s.lease)
		case ns.queued:
			ns.linger = sent.Add(s.lease/2 - s.margin)
			ns.recheck = ns.linger
		}
	case 2:
		fence := uint64(vals[1])
		ns.seen = max(ns.seen, fence)
		h.owner = s.member + ":" + strconv.FormatUint(fence, 10)
		h.fence, h.passes, h.since, h.waited = fence, 0, time.Now(), true
		h.deadline = sent.Add(s.lease - s.margin)
		if len(ns.waiters) > 0 {
			s.handTo(ns, h, 0)
		}
	}
	return nil
}

// cohortWindow bounds how long a session keeps passing a lock among its
// own goroutines before Redis may grant it to another session.
const cohortWindow = 10 * time.Millisecond

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
