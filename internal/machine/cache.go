package machine

import "time"

// Lock caching: a session keeps a lock it keeps re-locking, unused, after
// Unlock (Options.CacheIdle), and another session's recall or the end of
// the cache time releases it.

// recent remembers when each of a set of names last saw some event, and
// a count, for a while: entries older than that go once the map has
// doubled.
type recent struct {
	at   map[string]event
	size int // after the last pruning
}

type event struct {
	at time.Time
	n  int
}

// note records lname's event at now with count k, keeping events for keep.
func (r *recent) note(lname string, now time.Time, k int, keep time.Duration) {
	if r.at == nil {
		r.at = make(map[string]event)
	}
	if len(r.at) >= max(64, 2*r.size) {
		for name, ev := range r.at {
			if now.Sub(ev.at) >= keep {
				delete(r.at, name)
			}
		}
		r.size = len(r.at)
	}
	r.at[lname] = event{now, k}
}

// last returns lname's last event, if noted.
func (r *recent) last(lname string) (event, bool) {
	ev, ok := r.at[lname]
	return ev, ok
}

// maxCached bounds the holds a session keeps cached, so that what an idle
// or crashed process holds for nothing stays small.
const maxCached = 1024

// cacheable reports whether h, unlocked at now with nobody here waiting,
// may stay cached: a lock (permits never pass locally), free when Redis
// gave it (a hold that waited, or that another session asked for, has
// company that would pay a recall), with room for another local token and
// time before its deadline.
func (n *Name) cacheable(h *hold, now time.Time) bool {
	r := n.s.rules
	return r.CacheIdle > 0 && n.ID.Kind == LockKind && !n.s.closed && !h.waited && !h.recalled && !h.suspect &&
		h.passes+1 < 1<<tokenShift && h.deadline.Sub(now) > r.Lease/3 && n.s.cached < maxCached && !n.recentlyRecalled(now)
}

// recentlyRecalled reports whether another session asked for the name in
// the last lease/2: two sessions taking turns would pay a recall each
// turn if either cached it.
func (n *Name) recentlyRecalled(now time.Time) bool {
	ev, ok := n.s.recalled.last(n.ID.Name)
	return ok && now.Sub(ev.at) < n.s.rules.Lease/2
}

// streak returns how many times in a row the session locked the name
// again within CacheIdle of unlocking it, h's acquisition included. Only a
// name re-locked twice so is cached: a name locked now and then (by
// chance soon after its last Unlock, as with many names at random) would
// cost a release when its cache time ends on top of the call that cached
// it, or a recall.
func (n *Name) streak(h *hold) int {
	ev, ok := n.s.unlocked.last(n.ID.Name)
	if !ok || h.since.Sub(ev.at) > n.s.rules.CacheIdle {
		return 0
	}
	return ev.n + 1
}

// takeCached hands the cached hold to a caller of Lock or TryLock, under
// the next local token, or returns nil when the name is not cached (or its
// hold is suspect: a notice came, and it is released instead). The
// caller has applied the passing of time first: a hold past its deadline
// is lost, not served.
func (n *Name) takeCached(now time.Time) *Lock {
	h := n.hold
	if n.st != Cached || h.suspect || len(n.waiters) > 0 || n.s.closed || !now.Before(h.deadline) {
		return nil
	}
	n.uncache()
	n.st = Held
	h.passes++
	l := n.newLock(h, h.passes, now, HowCached)
	n.s.Give(l)
	return l
}

// cache puts the held hold, unused, in the cache until CacheIdle from now.
func (n *Name) cache(now time.Time) {
	h := n.hold
	h.cachedTo, h.wasCache = now.Add(n.s.rules.CacheIdle), true
	n.st = Cached
	n.s.cached++
	n.s.due(h.cachedTo)
}

// uncache ends the hold's stay in the cache, if cached; the state is the
// caller's to set.
func (n *Name) uncache() {
	if n.st == Cached {
		n.hold.cachedTo = time.Time{}
		n.s.cached--
		n.st = Held
	}
}

// recall applies another session asking for the name (a recall message,
// or a renewal that found sessions queued): a cached hold is released to
// it now, one in use at its Unlock, and the name is not cached again for
// lease/2.
func (n *Name) recall(now time.Time) {
	n.s.noteRecall(n.ID.Name, now)
	if !n.owns() {
		return
	}
	n.hold.recalled = true
	n.dropCache(now)
}

// noteRecall remembers at now that another session asked for lname.
func (s *Session) noteRecall(lname string, now time.Time) {
	s.recalled.note(lname, now, 0, s.rules.Lease/2)
}

// dropCache releases the cached hold now, or does nothing when the name is
// not cached: the end of its cache time, a recall, or a notice that its
// key changed or a connection dropped (nobody uses it: release it, which
// tells whether it was still ours, rather than hand it out before a check).
func (n *Name) dropCache(now time.Time) {
	if n.st != Cached {
		return
	}
	n.uncache()
	n.settle(now)
}

// kept applies a release in mode Keep that kept h, sent at sent: nobody
// was queued. It goes to a waiter that came meanwhile, else into the
// cache unless recalled meanwhile (then settle releases it). stale says a
// notice came while the release flew (the key changed, a connection
// dropped, a flush): Redis's word is old already, so the hold is not
// cached but released (a waiter gets it, checked at once).
func (n *Name) kept(h *hold, sent, now time.Time, stale bool) {
	h.deadline, h.redisBy = maxTime(h.deadline, sent.Add(n.s.rules.Lease-n.s.margin)), now.Add(n.s.rules.Lease)
	h.wasCache = true
	h.suspect = h.suspect || stale
	n.st, n.hold = Held, h
	switch {
	case n.s.closed:
	case len(n.waiters) > 0 && h.passes+1 < 1<<tokenShift:
		h.passes++
		n.handHead(h, h.passes, now, HowCached)
		if stale {
			n.checkHold(now)
		}
	case len(n.waiters) == 0 && n.cacheable(h, now):
		n.cache(now)
	}
}
