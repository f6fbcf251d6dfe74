package machine

import (
	"time"
)

// Notices: what Redis tells a session unasked. Grant messages, which a
// release publishes to the session it gave the lock to, and the
// subscription they come on (Redis Cluster); tracking invalidations of a
// key; a dropped connection or a flush; an election's announcements. (A
// recall is in cache.go.)

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
		if n.gone {
			n = n.s.renamed(n) // the loss forgot it
		}
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
	if n.s.rules.Replicas > 0 || n.w.unsure || n.flushedSinceEntry() || n.ID.Kind == ElectKind {
		// Replicas may not have the grant yet, or it may be one that a
		// call whose reply was lost passed on, or one a flush may have
		// deleted since, or it is a leadership, which is announced only
		// once its Campaign takes it: the head acquires it again, which
		// confirms it.
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
	h := &hold{owner: n.owner(g.fence), fence: g.fence, deadline: deadline, redisBy: n.expiresBy(now), since: now, basis: n.w.entryAt, waited: true}
	n.st, n.hold, n.w = Held, h, wait{}
	n.handHead(h, 0, now, HowGranted)
	n.trackHold(now)
	if stale {
		// The key changed since we last asked (a grant changes it too, but
		// so does a DEL): make sure it is ours.
		n.checkHold(now)
	}
}

// flushedSinceEntry reports whether Redis may have flushed (or a
// connection dropped) since the last call that found our queue entry: a
// grant read since may be one that ran before the flush, whose key is
// gone (a grant message and the flush's notice come on different
// connections, in either order).
func (n *Name) flushedSinceEntry() bool {
	return !n.w.flushed.IsZero() && !n.w.entryAt.After(n.w.flushed)
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

// Granted applies a grant message for id read at now (made if new: a grant
// can be the first we hear of a name).
func (s *Session) Granted(id ID, fence uint64, now time.Time) {
	n := s.name(id)
	if n.expire(now); n.gone {
		n = s.name(id)
	}
	n.granted(grant{fence: fence, read: now}, now)
}

// Invalidated applies a tracking invalidation of lock lname's key.
func (s *Session) Invalidated(lname string, now time.Time) {
	if n := s.names[ID{Name: lname}]; n != nil {
		if n.expire(now); !n.gone {
			n.invalidated(now)
		}
	}
}

// Subscribed applies the confirmation of id's grant subscription (Redis
// Cluster): first, or again after a failure (a grant may have been missed).
func (s *Session) Subscribed(id ID, now time.Time) {
	if n := s.names[id]; n != nil {
		if n.expire(now); !n.gone {
			n.subscribed(now)
		}
	}
}

// SubRefused applies Redis refusing id's grant subscription: its waiters
// fail with err.
func (s *Session) SubRefused(id ID, err error) {
	if n := s.names[id]; n != nil {
		n.subRefused(err)
	}
}

// Announced applies an announcement of election lname's new state, read at
// now: fence is the new leader's (member) or, with member "", the last one
// issued once nobody leads. A leadership of ours that it supersedes is
// over: another campaign leads under a newer fence, or nobody does.
func (s *Session) Announced(lname string, fence uint64, member string, now time.Time) {
	s.each(func(n *Name) {
		if n.ID.Kind == ElectKind && n.ID.Name == lname {
			if n.expire(now); n.gone {
				return
			}
			n.announced(fence, member, now)
		}
	})
}

// invalidated applies a tracking invalidation of the key. A held key was
// deleted, overwritten or changed: check it at once; a cached one is
// released, which tells whether it was still ours. Else, if our session is
// next in line (or not queued), the head looks again; sessions further
// back wait for their grant.
func (n *Name) invalidated(now time.Time) {
	switch {
	case n.st == Cached:
		n.dropCache(now)
	case n.st == Held:
		// Not passed on within the session until Redis says it is ours.
		n.hold.suspect = true
		n.checkHold(now)
	case n.st == Acquiring || n.st == Releasing:
		n.fl.stale = true
	case (n.st.free() || n.st == Queued && n.w.pos <= 0) && len(n.waiters) > 0:
		// A grant to us changes the key too; give its message a moment
		// to arrive before asking Redis.
		n.w.stale = true
		n.w.recheck = now.Add(staleGrace)
		n.wakeHead()
	}
}

// reconnected applies a dropped connection or subscription, or a flush:
// notifications and grants may have been lost. A hold is suspect until
// renewed (Redis may have lost it), a cached one is released, the head
// asks Redis again, and a lingering session leaves the queue, passing on
// what was granted to it.
func (n *Name) reconnected(now time.Time) {
	switch n.st {
	case Cached:
		n.dropCache(now)
	case Held:
		n.hold.suspect = true
		n.checkHold(now)
	case Acquiring, Releasing, Leaving:
		n.fl.stale, n.fl.reset, n.w.flushed = true, true, now
	case Idle, Unknown, Queued:
		n.w.stale, n.w.recheck, n.w.flushed = true, time.Time{}, now
		n.wakeHead()
	case Lingering:
		n.st, n.w.linger = Queued, span{}
		n.settle(now)
	}
}
