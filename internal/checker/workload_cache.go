package checker

// Lock caching in the workload (baton.Options.CacheIdle): how each
// acquisition was made, as the Clients' Observer reported it (Event.How),
// and what the record and the samples show of cached locks.
//
// A lock name's hold A, released by an Unlock (or Do) that returned nil at
// u, was cached if a read of the key (by the sampler, every 10 ms, or at
// the end of each burst, Workload.Bursts) found it still A's session's
// (its "<member>:<fence>") at some instant after u and before the next
// acquisition B of the name, while no other call of A's session on the
// name was in flight without a hold (a grant nobody took up) and A's
// session's Close had not begun. Then:
//
//   - B is a recall when another session made it and baton says it was
//     Granted (B's session queued behind A's cached key, and A's session
//     released the key to it); the recall's wait is from u (or B's call,
//     if later) to B's return: a stretch oracle (d) sees as free, as the
//     key is held in Redis but nobody holds the lock by the record;
//   - after a recall, the next acquisition of the name that A's session
//     takes from its cache is a re-caching (the name was cached again
//     once its recall was old enough);
//   - a cached key that the next sample after it read free, with no call
//     of another session on the name begun meanwhile and no Close of A's
//     session begun, ran out of cache time.
//
// Each count needs such a read: it is a lower bound.

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton"
)

type howKey struct {
	name  string
	token uint64
}

// observer returns the Observer of a workload Client: it records how
// every acquisition was made (Event.How of its Acquired event), then
// passes the event on to next (nil: none).
func (r *wrun) observer(next baton.Observer) baton.Observer {
	return baton.ObserverFunc(func(ctx context.Context, ev baton.Event) {
		if ev.Kind == baton.Acquired {
			r.howMu.Lock()
			r.hows[howKey{ev.Name, ev.Token}] = ev.How
			r.howMu.Unlock()
		}
		if next != nil {
			next.Observe(ctx, ev)
		}
	})
}

// setHowsLocked gives every acquisition how the Observer said it was made
// (0 if no Acquired event named its name and token, or a child process
// made it) and counts them in the report. r.mu is held.
func (r *wrun) setHowsLocked(rep *WorkloadReport) {
	r.howMu.Lock()
	defer r.howMu.Unlock()
	rep.Hows = map[string]int{}
	for _, h := range r.holds {
		if !h.sess.killed.IsZero() {
			rep.Hows["child"]++ // a child process's: its Observer is its own
			continue
		}
		h.how = r.hows[howKey{r.names[h.name], h.token}]
		if h.how == 0 {
			rep.Hows["unknown"]++
			continue
		}
		rep.Hows[h.how.String()]++
		if h.how == baton.Cached {
			rep.CachedAcquisitions++
		}
	}
}

// cacheLocked counts, on every lock name, the recalls of cached locks,
// the re-cachings after them and the cached locks whose cache time ran
// out, as the package comment says; holds are each name's acquisitions,
// sorted. r.mu is held.
func (r *wrun) cacheLocked(rep *WorkloadReport, holds [][]*whold) {
	for _, ss := range r.afterBurst {
		slices.SortFunc(ss, func(x, y sample) int { return x.sent.Compare(y.sent) })
	}
	var waits []time.Duration
	for name, hs := range holds {
		if r.limits[name] > 0 || name >= len(r.samples) {
			continue
		}
		calls := r.callsOnLocked(name)
		recalled := map[*wsession]bool{} // sessions whose cached lock of the name was recalled since they last took it from the cache
		for i, a := range hs {
			if a.how == baton.Cached && recalled[a.sess] {
				rep.Recached++
				recalled[a.sess] = false
			}
			u, ok := cleanRelease(a)
			if !ok {
				continue
			}
			var b *whold
			until := never
			if i+1 < len(hs) {
				b = hs[i+1]
				until = b.acquired
			}
			if cs := a.sess.closeStart; !cs.IsZero() && cs.Before(until) {
				until = cs // a Close releases what the session cached
			}
			if !until.After(u) || r.grantPendingLocked(calls, a, u, until) {
				continue
			}
			seen, value, ok := r.cachedSeen(name, a.sess, u, until)
			if !ok {
				continue
			}
			switch {
			case b != nil && until.Equal(b.acquired) && b.sess != a.sess && b.how == baton.Granted:
				rep.Recalls++
				recalled[a.sess] = true
				waits = append(waits, b.acquired.Sub(later(u, b.call.start)))
			case r.ranOut(name, seen, value, a.sess, calls, u, until):
				rep.CacheRanOut++
			}
		}
	}
	if len(waits) > 0 {
		slices.Sort(waits)
		rep.RecallWaitP50, rep.RecallWaitMax = waits[len(waits)/2], waits[len(waits)-1]
	}
}

// cleanRelease returns when h's Unlock (or Do's release) returned, if it
// returned nil for a hold that was neither lost nor ended by a Close.
func cleanRelease(h *whold) (time.Time, bool) {
	ok := h.unlocked && !h.unlockRet.IsZero() && h.unlockErr == nil && h.errAtEnd == nil && h.returnedEnded == nil &&
		h.lost().IsZero() && !h.closed() && h.sess.killed.IsZero()
	return h.unlockRet, ok
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

// callsOnLocked returns the calls on name, by start.
func (r *wrun) callsOnLocked(name int) []*wcall {
	var out []*wcall
	for _, c := range r.calls {
		if c.name == name {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(x, y *wcall) int { return x.start.Compare(y.start) })
	return out
}

// grantPendingLocked says whether a call of a's session on the name
// (calls, by start) that returned no hold was in flight between u and
// until: Redis may have granted the key to it, not kept it cached.
func (r *wrun) grantPendingLocked(calls []*wcall, a *whold, u, until time.Time) bool {
	for _, c := range calls {
		if !c.start.Before(until) {
			break
		}
		if c.sess == a.sess && c.hold == nil && (c.end.IsZero() || c.end.After(u)) {
			return true
		}
	}
	return false
}

// ownerOf returns the member a lock key's value names ("" if free or
// none).
func ownerOf(v string) string {
	if v == "" || strings.HasPrefix(v, "~") {
		return ""
	}
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		return v[:i]
	}
	return v
}

// cachedSeen says whether a sample of name, or a read at the end of a
// burst, read the key ws's at some instant strictly between from and to,
// and returns when the first such read ended and the value it read.
func (r *wrun) cachedSeen(name int, ws *wsession, from, to time.Time) (seen time.Time, value string, ok bool) {
	if ws.member == "" {
		return time.Time{}, "", false
	}
	lists := [][]sample{r.samples[name]}
	if name < len(r.afterBurst) {
		lists = append(lists, r.afterBurst[name])
	}
	for _, ss := range lists {
		i := sort.Search(len(ss), func(i int) bool { return ss[i].lastGot.After(from) })
		for ; i < len(ss) && ss[i].sent.Before(to); i++ {
			if ownerOf(ss[i].value) == ws.member && readWithin(ss[i], from, to) {
				if seen.IsZero() || ss[i].got.Before(seen) {
					seen, value = ss[i].got, ss[i].value
				}
				break
			}
		}
	}
	return seen, value, !seen.IsZero()
}

// readWithin says whether s shows its value in Redis at some instant
// strictly between from and to: its first or last read was inside, or
// the value stayed from the end of its first read to the start of its
// last (a key's value names its fence, which no later acquisition reuses,
// so it did not change in between) across part of [from, to].
func readWithin(s sample, from, to time.Time) bool {
	switch {
	case s.sent.After(from) && s.got.Before(to):
		return true
	case s.lastSent.After(from) && s.lastGot.Before(to):
		return true
	}
	return s.lastSent.After(s.got) && s.got.Before(to) && s.lastSent.After(from)
}

// ranOut says whether the key of name, read cached by ws (value) in a
// read that ended at seen, was read free by the sampler's next reading of
// another value, before until, with no call of another session on the
// name (calls, by start) begun since u and no Close of ws begun before
// that read.
func (r *wrun) ranOut(name int, seen time.Time, value string, ws *wsession, calls []*wcall, u, until time.Time) bool {
	ss := r.samples[name]
	k := sort.Search(len(ss), func(i int) bool { return ss[i].sent.After(seen) })
	for k < len(ss) && ss[k].value == value {
		k++
	}
	if k >= len(ss) {
		return false
	}
	next := ss[k]
	if !strings.HasPrefix(next.value, "~") || !next.got.Before(until) {
		return false
	}
	if cs := ws.closeStart; !cs.IsZero() && cs.Before(next.got) {
		return false
	}
	i := sort.Search(len(calls), func(i int) bool { return !calls[i].start.Before(u) })
	for ; i < len(calls) && calls[i].start.Before(next.got); i++ {
		if calls[i].sess != ws {
			return false // a recall by a TryLock, or by a Lock that gave up
		}
	}
	return true
}
