package baton

import "time"

// The grant side of the name machine (name.go): grant messages, which a
// release publishes to the session it gave the lock to, and on Redis
// Cluster the subscription they come on.

// grant is a grant message: the fence Redis gave us and when we read it.
type grant struct {
	fence uint64
	read  time.Time
}

// subscribed reports the name's grant subscription confirmed (ready) or
// renewed after a failure (a grant may have been missed).
func (n *name) subscribed(now time.Time) (e effects) {
	if n.sub == subPending {
		n.sub = subReady
		e.wakeHead(n)
		return e
	}
	return n.reconnected(now)
}

// subRefused applies Redis refusing the grant subscription (an ACL without
// the channel): the waiters fail with err instead of waiting for a grant
// that cannot reach them.
func (n *name) subRefused(err error) (e effects) {
	if n.sub != subPending {
		return e
	}
	n.sub, n.subErr = subNone, err
	e.wake = append(e.wake, n.waiters...)
	return e
}

// granted applies a grant message read off the socket at g.read.
func (n *name) granted(g grant, now time.Time) effects {
	if n.st.inCall() {
		if g.fence > n.grant.fence {
			n.grant = g
		}
		return effects{}
	}
	return n.applyGrant(g, now)
}

// applyGrant applies a grant while no call is in flight. Every grant has
// one fate: installed, confirmed by the head's next acquire, or released.
func (n *name) applyGrant(g grant, now time.Time) (e effects) {
	if g.fence <= n.seen {
		return e // stale: the key has moved on since
	}
	n.seen = g.fence
	if n.st == held {
		// The key named us under a newer fence: the hold's token is gone.
		e = n.lose(now, "Redis granted it to this session again under a newer fence", true)
	}
	if n.st == idle || len(n.waiters) == 0 || n.r.closed {
		// Not queued (a late attempt queued us after we left), nobody
		// wants it, or closed: pass it on.
		return e.merge(n.releaseStray(g.fence))
	}
	if n.r.confirm || n.unsure || n.id.kind == electKind {
		// Replicas may not have the grant yet, or it may be one that a
		// call whose reply was lost passed on, or it is a leadership,
		// which is announced only once its Campaign takes it: the head
		// acquires it again, which confirms it.
		n.st, n.recheck, n.expect = queued, time.Time{}, g.fence
		e.wakeHead(n)
		return e
	}
	// The release ran at a moment we cannot know (a message may be held up
	// for long: a partition, a slow reader), but not before Redis last
	// confirmed the queue entry it consumed: count the lease from then.
	// The entry is confirmed every LeaseTTL/3 while we wait.
	deadline := n.entryAt.Add(n.r.lease - n.r.margin)
	if n.entryAt.IsZero() || !now.Before(deadline) {
		// Too old to be sure it is still ours: pass it on (if it is), and
		// the head asks again.
		n.st, n.recheck = queued, time.Time{}
		return e.merge(n.releaseStray(g.fence))
	}
	h := &hold{owner: n.owner(g.fence), fence: g.fence, deadline: deadline, redisBy: now.Add(n.r.lease), since: now, waited: true}
	n.st, n.hold = held, h
	n.handHead(h, 0, now, Granted, &e)
	n.trackHold(now, &e)
	if n.stale {
		// The key changed since we last asked (a grant changes it too, but
		// so does a DEL): make sure it is ours.
		n.checkHold(now, &e)
	}
	return e
}

// releaseStray releases a lock granted to us that nobody here wants. A
// queued machine is queued again after it (see releaseReply).
func (n *name) releaseStray(fence uint64) (e effects) {
	e.call = n.start(releasing, request{kind: releaseCall, owner: n.owner(fence), fence: fence, mode: "0", rc: true, from: n.st})
	n.hold = nil
	return e
}
