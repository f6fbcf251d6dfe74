package checker

// Oracle (d), no idle wait: the busy spans of a name and the free
// stretches of each wait.

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// span is a time interval; hold, if set, is the acquisition behind it
// (after merging, the one that ends it) and first the one that begins it.
type span struct {
	from, to    time.Time
	hold, first *whold
}

// merge sorts and merges spans.
func merge(ss []span) []span {
	slices.SortFunc(ss, func(x, y span) int { return x.from.Compare(y.from) })
	var out []span
	for _, s := range ss {
		s.first = s.hold
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			if s.to.After(out[n-1].to) {
				out[n-1].to, out[n-1].hold = s.to, s.hold
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// gap is the longest stretch of [from, to] that no span in ss (merged)
// covers, and the spans that bound it (nil: from or to itself).
func gap(ss []span, from, to time.Time) (d time.Duration, start, end time.Time, before, after *span) {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].to.After(from) })
	cur := from
	var prev *span
	for ; i < len(ss) && ss[i].from.Before(to); i++ {
		s := &ss[i]
		if s.from.After(cur) && s.from.Sub(cur) > d {
			d, start, end, before, after = s.from.Sub(cur), cur, s.from, prev, s
		}
		if s.to.After(cur) {
			cur, prev = s.to, s
		}
	}
	if to.After(cur) && to.Sub(cur) > d {
		d, start, end, before, after = to.Sub(cur), cur, to, prev, nil
	}
	return d, start, end, before, after
}

// idle is oracle (d) for one name (its holds hs, its waiters ws); it returns the free stretch of every
// wait that had one.
func (r *wrun) idle(name int, hs []*whold, ws []*wcall) []time.Duration {
	var busy []span
	for _, h := range hs {
		busy = append(busy, span{from: h.acquired, to: r.freeAfterChangeLocked(h), hold: h})
	}
	busy = append(busy, r.deadWaitersLocked(name)...)
	for _, f := range r.faults {
		to := f.to
		if to.IsZero() {
			to = never
		} else {
			to = to.Add(r.cfg.FaultGrace)
		}
		busy = append(busy, span{from: f.from, to: to})
	}
	busy = merge(busy)
	var out []time.Duration
	ahead := time.Time{} // latest end of the waiters that started earlier
	for i, w := range ws {
		end := w.end
		if end.IsZero() {
			end = never
		}
		from, to := w.start, end
		if ahead.After(from) {
			from = ahead
		}
		if ahead.Before(end) {
			ahead = end
		}
		if cs := w.sess.closeStart; !cs.IsZero() && cs.Before(to) {
			to = cs
		}
		if !to.After(from) || !to.Before(never) {
			continue
		}
		d, gs, ge, before, after := gap(busy, from, to)
		if d <= 0 {
			continue
		}
		out = append(out, d)
		msg := func() string { return r.idleText(w, ws[i+1:], d, gs, ge, before, after) }
		if d <= r.cfg.WaitBound {
			if d > r.cfg.WaitBound/4 {
				r.nearIdle = append(r.nearIdle, idleCase{d, msg})
			}
			continue
		}
		r.failLocked(oIdle, "%s", msg())
	}
	return out
}

// idleCase is an idle stretch within the bound, kept to show the largest.
type idleCase struct {
	d   time.Duration
	msg func() string
}

// idleText describes waiter w's idle stretch [gs, ge] of length d, between
// the spans before and after; later are the waiters that called after w.
func (r *wrun) idleText(w *wcall, later []*wcall, d time.Duration, gs, ge time.Time, before, after *span) string {
	since := "the wait began"
	switch {
	case before != nil && before.hold != nil:
		since = "the release of " + r.holdText(before.hold) + " (" + r.endText(before.hold) + ")"
	case before != nil:
		since = "a fault window's grace ended"
	case gs.After(w.start):
		since = "the last waiter ahead returned"
	}
	until := "its wait ended"
	if after != nil && after.first != nil {
		until = "then " + r.holdText(after.first) + " acquired it"
	} else if after != nil {
		until = "a fault window began"
	}
	outcome := "acquired token " + fmt.Sprint(w.hold.tokenOr())
	if w.hold == nil {
		outcome = cmp.Or(w.kind, "?") + ": " + w.errText
	}
	behind := 0
	for _, x := range later {
		if x.start.After(ge) {
			break
		}
		behind++
	}
	queued := ""
	if q := r.queuedShare(w.name, w.sess, gs, ge); q >= 0 {
		queued = fmt.Sprintf("; its session was queued (or owner) in Redis for %.0f%% of it", 100*q)
	}
	return fmt.Sprintf("%s: %s by %s (called %s, timeout %v, returned %s: %s) waited %s on a name free by the record with nobody ahead: from %s (after %s) to %s (%s); %d waiters arrived behind it meanwhile%s. %s",
		r.names[w.name], w.op, w.sess.label, r.at(w.start), w.timeout, r.at(w.end), outcome, ms(d), r.at(gs), since, r.at(ge), until, behind,
		queued, r.redisDuring(w.name, gs, ge))
}
