package machine

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// The acquiring side of the machine: the replies of acquire calls.

// acquireReply applies the reply of an acquire try. next is the same
// attempt again, at once (its connection had died before it ran); l is
// TryLock's lock when its attempt took the name (a waiter's lock is handed
// to it); err is the try's error, for the caller (a waiter whose attempt
// Redis refused for good is told so by its next Poll).
func (n *Name) acquireReply(r Reply, now time.Time) (next *Call, l *Lock, err error) {
	fl := n.fl
	fl.tries++
	if again := n.againAt(r, now); !again.IsZero() {
		fl.call.At = again
		return fl.call, nil, nil
	}
	n.fl = nil
	n.st = fl.from
	n.w.unsure = r.Outcome.mayHaveRun() || r.Outcome == NotSent
	if r.Outcome.failed() {
		err = r.Err
	}
	notReplicated := r.Outcome == OK && r.Acquired && n.s.rules.Replicas > 0 && r.Acked < int64(n.s.rules.Replicas)
	if notReplicated {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged %q", ErrNotReplicated, max(r.Acked, 0), n.s.rules.Replicas, keyspace.Truncate(n.ID.Name))
	}
	switch {
	case r.Outcome == Refused || notReplicated:
		// Refused for good (NOPERM, WRONGTYPE, a value not ours, a limit
		// mismatch), or not replicated: the waiter stops; the name is as
		// before, but for a take that was not replicated, which is undone:
		// a failover could lose it and let another client in.
		if fl.w != nil {
			fl.w.err = &OpError{n.acquireOp(false), err}
		}
		if notReplicated {
			// Undone before the caller hears (inline): the release reports
			// err when it ends.
			n.seen = max(n.seen, r.Fence)
			c := n.releaseStray(r.Fence, false, now)
			n.fl.report = err
			return c, nil, nil
		}
	case r.Outcome.failed():
		// Busy, or a reply lost: the script may have queued us or taken the
		// lock (but for Busy and NotSent: it did not run). The head asks
		// again after a pause.
		if r.Outcome != Busy && r.Outcome != NotSent {
			n.st, n.unk = Queued, nil // a dequeue releases what it may have taken
		}
		if fl.w != nil {
			fl.w.fails++
			n.w.recheck = now.Add(n.s.backoff(fl.w.fails))
		}
	case r.Acquired && r.Kept && r.Fence <= n.seen && r.Fence != n.w.expect:
		// A hold of ours that a failed release left behind: release it,
		// then try again.
		n.st, n.w.recheck = Idle, time.Time{}
		cached := n.unk != nil && n.unk.cached
		n.unk = nil
		n.launch(n.releaseStray(r.Fence, cached, now))
		return nil, nil, nil
	case r.Acquired && !now.Before(r.Sent.Add(n.s.rules.Lease-n.s.margin)):
		// Answered after its lease could have run out: release it (if it
		// is still ours) and try again.
		n.seen = max(n.seen, r.Fence)
		n.w.recheck = time.Time{}
		n.launch(n.releaseStray(r.Fence, false, now))
		return nil, nil, nil
	case r.Acquired:
		if fl.w != nil {
			fl.w.fails = 0
		}
		return nil, n.acquired(fl, r, now), nil
	default:
		if fl.w != nil {
			fl.w.fails = 0
		}
		n.busy(fl, r, now)
	}
	n.settle(now)
	return nil, nil, err
}

// againAt says when to send an acquire call again at once, for the same
// caller, after a try that failed with r (zero: not). A connection that had
// died before the call used it (a restart, a failover) fails the first
// call it gets: try again at once, a few times, then after short pauses. On Redis Cluster a dial
// refused means a failover moved the slot, and rueidis looks for its new
// primary after such a failure: try again after a pause. Repeating an
// attempt is safe: a lock an earlier run took is ours, and kept.
func (n *Name) againAt(r Reply, now time.Time) time.Time {
	fl := n.fl
	if n.s.closed || fl.left || fl.w != nil && !n.isHead(fl.w) || !fl.call.Until.IsZero() && !now.Before(fl.call.Until) {
		return time.Time{}
	}
	switch {
	case r.Outcome == Died && fl.tries < staleTries:
		return now
	case r.Outcome == Died:
		// Connections keep dying under it (restarts, other callers'
		// deadlines closing a shared one): pause a little, until the
		// call's deadline.
		return now.Add(min(time.Duration(fl.tries)*time.Millisecond, 20*time.Millisecond))
	case r.Outcome == NotSent && n.s.rules.Sharded && fl.tries <= 10:
		return now.Add(time.Duration(fl.tries) * 10 * time.Millisecond)
	}
	return time.Time{}
}

// busy applies an acquire reply that found the name taken: the session
// waits, queued or not, until a grant or the time the reply gave.
func (n *Name) busy(fl *flight, r Reply, now time.Time) {
	n.seen = max(n.seen, r.Fence)
	n.w.pos = r.Pos
	if r.Pos >= 0 || fl.from == Queued || n.ID.Kind == ElectKind {
		// (What an unknown outcome left is moot: the key is not ours, and
		// we are queued.) A campaign's attempt wrote its value, queued or
		// not: it is left by a dequeue, which removes the value too.
		n.st, n.unk = Queued, nil
	}
	n.w.recheck = now.Add(r.Wait)
	if r.Pos >= 0 {
		n.w.entryAt = r.Sent
	}
	if fl.stale {
		// The key changed (or a connection dropped) while we asked: the
		// answer may be old already.
		n.w.stale = true
		n.w.recheck = now.Add(staleGrace)
	}
	if fl.try && len(n.waiters) > 0 {
		// Waiters came during TryLock's attempt, which did not queue: the
		// head asks (and queues) now.
		n.w.recheck = time.Time{}
	}
	if !fl.call.Queue && !fl.try && n.s.rules.Sharded && n.sub == subNone {
		// Busy on Redis Cluster: listen for grants, then queue.
		n.subscribe()
		n.w.recheck = time.Time{}
	}
	if r.Pos >= 0 && len(n.waiters) > 0 {
		n.s.out.Queued = append(n.s.out.Queued, QueuedNote{Name: n.ID.Name, Pos: r.Pos})
	}
}

// acquired applies an acquire reply that took the lock (or found it ours
// already: kept): it goes to TryLock's caller or the head waiter, or back
// to Redis when nobody wants it any more.
func (n *Name) acquired(fl *flight, r Reply, now time.Time) (l *Lock) {
	how := HowFree
	if r.Kept && r.Fence == n.w.expect {
		how = HowGranted // a grant, confirmed
	}
	n.seen, n.w.expect = max(n.seen, r.Fence), 0
	stale := fl.stale
	h := &hold{owner: n.owner(r.Fence), fence: r.Fence, deadline: r.Sent.Add(n.s.rules.Lease - n.s.margin), redisBy: now.Add(n.s.rules.Lease), since: now}
	n.st, n.hold, n.w, n.unk = Held, h, wait{}, nil
	if n.s.closed || fl.left || !fl.try && len(n.waiters) == 0 {
		n.settle(now) // nobody to take it: released
		return nil
	}
	h.waited = !fl.try && n.waiters[0].tries > 1
	n.trackHold(now)
	if stale {
		// The key changed, or a connection dropped, while we asked:
		// Redis may have lost it since (a flush, a restart).
		n.checkHold(now)
	}
	if fl.try {
		l = n.newLock(h, 0, now, how)
	} else {
		n.handHead(h, 0, now, how)
	}
	n.settle(now)
	return l
}

// isHead reports whether w is the head waiter.
func (n *Name) isHead(w *Waiter) bool { return len(n.waiters) > 0 && n.waiters[0] == w }
