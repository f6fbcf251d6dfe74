package baton

import "time"

// Lock caching, in the name machine (name.go): a session keeps a lock it
// keeps re-locking, unused, after Unlock (Options.CacheIdle), and another
// session's recall or the end of the cache time releases it.

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
func (n *name) cacheable(h *hold, now time.Time) bool {
	return n.r.cacheIdle > 0 && n.id.kind == lockKind && !n.r.closed && !h.waited && !h.recalled && !h.suspect &&
		h.passes+1 < 1<<tokenShift && h.deadline.Sub(now) > n.r.lease/3 && n.r.cached < maxCached && !n.recentlyRecalled(now)
}

// recentlyRecalled reports whether another session asked for the name in
// the last lease/2: two sessions taking turns would pay a recall each
// turn if either cached it.
func (n *name) recentlyRecalled(now time.Time) bool {
	ev, ok := n.r.recalled.last(n.id.name)
	return ok && now.Sub(ev.at) < n.r.lease/2
}

// streak returns how many times in a row the session locked the name
// again within CacheIdle of unlocking it, h's acquisition included. Only a
// name re-locked twice so is cached: a name locked now and then (by
// chance soon after its last Unlock, as with many names at random) would
// cost a release when its cache time ends on top of the call that cached
// it, or a recall.
func (n *name) streak(h *hold) int {
	ev, ok := n.r.unlocked.last(n.id.name)
	if !ok || h.since.Sub(ev.at) > n.r.cacheIdle {
		return 0
	}
	return ev.n + 1
}

// takeCached hands the cached hold to a caller of Lock or TryLock, under
// the next local token, or returns nil when the name is not cached.
func (n *name) takeCached(now time.Time) *Lock {
	h := n.hold
	if n.st != held || h.cachedTo.IsZero() || h.suspect || len(n.waiters) > 0 || n.r.closed {
		return nil
	}
	n.uncache()
	h.passes++
	return n.newLock(h, h.passes, now, Cached)
}

// cache puts the held hold, unused, in the cache until CacheIdle from now.
func (n *name) cache(now time.Time, e *effects) {
	h := n.hold
	h.cachedTo, h.wasCache = now.Add(n.r.cacheIdle), true
	n.r.cached++
	e.due(h.cachedTo)
}

// uncache ends the hold's stay in the cache, if cached.
func (n *name) uncache() {
	if h := n.hold; h != nil && !h.cachedTo.IsZero() {
		h.cachedTo = time.Time{}
		n.r.cached--
	}
}

// recall applies another session asking for the name (a recall message,
// or a renewal that found sessions queued): a cached hold is released to
// it now, one in use at its Unlock, and the name is not cached again for
// lease/2.
func (n *name) recall(now time.Time) (e effects) {
	n.r.noteRecall(n.id.name, now)
	if n.st != held {
		return e
	}
	n.hold.recalled = true
	e, _ = n.dropCache(now)
	return e
}

// noteRecall remembers at now that another session asked for lname.
func (r *rules) noteRecall(lname string, now time.Time) {
	r.recalled.note(lname, now, 0, r.lease/2)
}

// dropCache releases the cached hold now, or does nothing when the
// name is not cached: the end of its cache time, a recall, or a notice
// that its key changed or a connection dropped (nobody uses it: release
// it, which tells whether it was still ours, rather than hand it out
// before a check).
func (n *name) dropCache(now time.Time) (e effects, ok bool) {
	if n.st != held || n.hold.cachedTo.IsZero() {
		return e, false
	}
	n.uncache()
	return n.settle(now), true
}

// kept applies a release in mode "k" that kept h, sent at sent: nobody
// was queued. It goes to a waiter that came meanwhile, else into the
// cache unless recalled meanwhile (then settle releases it).
func (n *name) kept(h *hold, sent, now time.Time, e *effects) {
	h.deadline, h.redisBy = maxTime(h.deadline, sent.Add(n.r.lease-n.r.margin)), now.Add(n.r.lease)
	h.wasCache = true
	n.st, n.hold = held, h
	switch {
	case n.r.closed:
	case len(n.waiters) > 0 && h.passes+1 < 1<<tokenShift:
		h.passes++
		n.handHead(h, h.passes, now, Cached, e)
	case len(n.waiters) == 0 && n.cacheable(h, now):
		n.cache(now, e)
	}
}
