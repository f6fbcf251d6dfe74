package machine

import (
	"time"
)

// The grant side of the machine: grant messages, which a release publishes
// to the session it gave the lock to, the subscription they come on
// (Redis Cluster), and an election's announcements.

// grant is a grant message: the fence Redis gave us and when we read it.
type grant struct {
	fence uint64
	read  time.Time
}

// subscribed applies the name's grant subscription confirmed (ready) or
// renewed after a failure (a grant may have been missed).
func (n *Name) subscribed(now time.Time) {
	if n.sub == subPending {
		n.sub = subReady
		n.wakeHead()
		return
	}
	n.reconnected(now)
}

// subRefused applies Redis refusing the grant subscription (an ACL without
// the channel): the waiters fail with err instead of waiting for a grant
// that cannot reach them.
func (n *Name) subRefused(err error) {
	if n.sub != subPending {
		return
	}
	n.sub, n.subErr = subNone, err
	n.s.out.Wake = append(n.s.out.Wake, n.waiters...)
}

// granted applies a grant message read off the socket at g.read.
func (n *Name) granted(g grant, now time.Time) {
	if n.st.inCall() {
		if g.fence > n.grant.fence {
			n.grant = g
		}
		return
	}
	n.applyGrant(g, now)
}

// applyGrant applies a grant while no call is in flight. Every grant has
// one fate: installed, confirmed by the head's next acquire, or released.
func (n *Name) applyGrant(g grant, now time.Time) {
	if g.fence <= n.seen {
		return // stale: the key has moved on since
	}
	n.seen = g.fence
	if n.owns() {
		// The key named us under a newer fence: the hold's token is gone.
		n.lose(now, Superseded, true)
		if n.st.inCall() {
			// Its loss released something (a hold a closed session no
			// longer wants): this grant follows when that call ends.
			n.grant = g
			return
		}
	}
	if n.st.free() || len(n.waiters) == 0 || n.s.closed {
		// Not queued (a late attempt queued us after we left), nobody
		// wants it, or closed: pass it on.
		n.launch(n.releaseStray(g.fence, false, now))
		return
	}
	if n.s.rules.Replicas > 0 || n.w.unsure || n.ID.Kind == ElectKind {
		// Replicas may not have the grant yet, or it may be one that a
		// call whose reply was lost passed on, or it is a leadership,
		// which is announced only once its Campaign takes it: the head
		// acquires it again, which confirms it.
		n.st, n.w.recheck, n.w.expect = Queued, time.Time{}, g.fence
		n.wakeHead()
		return
	}
	// The release ran at a moment we cannot know (a message may be held up
	// for long: a partition, a slow reader), but not before Redis last
	// confirmed the queue entry it consumed: count the lease from then.
	// The entry is confirmed every LeaseTTL/3 while we wait.
	deadline := n.w.entryAt.Add(n.s.rules.Lease - n.s.margin)
	if n.w.entryAt.IsZero() || !now.Before(deadline) {
		// Too old to be sure it is still ours: pass it on (if it is), and
		// the head asks again.
		n.st, n.w.recheck = Queued, time.Time{}
		n.launch(n.releaseStray(g.fence, false, now))
		return
	}
	stale := n.w.stale
	h := &hold{owner: n.owner(g.fence), fence: g.fence, deadline: deadline, redisBy: now.Add(n.s.rules.Lease), since: now, waited: true}
	n.st, n.hold, n.w = Held, h, wait{}
	n.handHead(h, 0, now, HowGranted)
	n.trackHold(now)
	if stale {
		// The key changed since we last asked (a grant changes it too, but
		// so does a DEL): make sure it is ours.
		n.checkHold(now)
	}
}

// announced applies an announcement of the election's new state: fence is
// the new leader's, member its member ("" once nobody leads, fence then
// the last one issued). A hold of ours below it is over: Redis has moved
// on, whatever our last renewal said.
func (n *Name) announced(fence uint64, member string, now time.Time) {
	if !n.owns() || member == n.Member || fence < n.hold.fence {
		return
	}
	switch {
	case member == "":
		// Nobody leads after our fence: our leadership was force-released
		// (or expired, and another's came and went).
		n.lose(now, TakenOver, true)
	case fence > n.hold.fence:
		n.lose(now, Superseded, true)
	}
}
