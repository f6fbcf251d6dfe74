package baton

import "time"

// The acquiring side of the name machine (name.go): the replies of
// acquire calls.

// acquireReply applies the reply of an acquire call sent at sent. retry is
// when to try again after a transient error. It returns the lock for
// TryLock's caller when acquired (a waiter's lock is handed to it).
func (n *name) acquireReply(seq uint64, sent, now time.Time, a attempt, err error, retry time.Time) (*Lock, effects) {
	var e effects
	if n.st != acquiring || seq != n.seq {
		panic("baton: acquire reply for a call not in flight")
	}
	req := n.call
	n.call = nil
	n.unsure = err != nil && !isRedisErr(err)
	switch {
	case err != nil && isRedisErr(err):
		// Refused (READONLY, LOADING, NOPERM, a value not ours, ...):
		// nothing changed; the head tries again later if it may pass.
		n.st, n.recheck = req.from, retry
	case err != nil && !transient(err):
		n.st = req.from // ErrNotReplicated: undone
	case err != nil:
		// Unknown outcome: the script may have queued us or taken the lock.
		n.st, n.recheck = queued, retry
	case a.acquired && a.kept && a.fence <= n.seen && a.fence != n.expect:
		// A hold of ours that a failed release left behind: release it,
		// then try again.
		n.st, n.recheck = idle, time.Time{}
		return nil, n.releaseStray(a.fence)
	case a.acquired && !now.Before(sent.Add(n.r.lease-n.r.margin)):
		// Answered after its lease could have run out: release it (if it
		// is still ours) and try again.
		n.seen = max(n.seen, a.fence)
		n.recheck = time.Time{}
		return nil, n.releaseStray(a.fence)
	case a.acquired:
		return n.acquired(req, sent, now, a)
	default:
		n.seen = max(n.seen, a.fence)
		n.pos = a.pos
		n.st = idle
		if a.pos >= 0 || req.from == queued {
			n.st = queued
		}
		n.recheck = now.Add(a.wait)
		if a.pos >= 0 {
			n.entryAt = sent
		}
		if n.stale {
			// The key changed (or a connection dropped) while we asked:
			// the answer may be old already.
			n.recheck = now.Add(staleGrace)
		}
		if req.try && len(n.waiters) > 0 {
			// Waiters came during TryLock's attempt, which did not queue:
			// the head asks (and queues) now.
			n.recheck = time.Time{}
		}
		if !req.queue && !req.try && n.r.sharded && n.sub == subNone {
			// Busy on Redis Cluster: listen for grants, then queue.
			n.sub, e.sub, n.recheck = subPending, true, time.Time{}
		}
		e.queued = a.pos >= 0
	}
	return nil, e.merge(n.settle(now))
}

// acquired applies an acquire reply that took the lock (or found it ours
// already: kept): it goes to TryLock's caller or the head waiter, or back
// to Redis when nobody wants it any more.
func (n *name) acquired(req *request, sent, now time.Time, a attempt) (l *Lock, e effects) {
	how := Free
	if a.kept && a.fence == n.expect {
		how = Granted // a grant, confirmed
	}
	n.seen, n.expect = max(n.seen, a.fence), 0
	h := &hold{owner: n.owner(a.fence), fence: a.fence, deadline: sent.Add(n.r.lease - n.r.margin), redisBy: now.Add(n.r.lease), since: now}
	n.st, n.hold = held, h
	if n.r.closed || req.left || !req.try && len(n.waiters) == 0 {
		return nil, n.settle(now) // nobody to take it: released
	}
	h.waited = !req.try && n.waiters[0].tries > 1
	n.trackHold(now, &e)
	if n.stale {
		// The key changed, or a connection dropped, while we asked:
		// Redis may have lost it since (a flush, a restart).
		n.checkHold(now, &e)
	}
	if req.try {
		l = n.newLock(h, 0, now, how)
	} else {
		n.handHead(h, 0, now, how, &e)
	}
	return l, e.merge(n.settle(now))
}
