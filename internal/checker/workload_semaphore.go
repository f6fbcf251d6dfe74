package checker

// Semaphores in the workload (Workload.Semaphores): names "<prefix>-s<i>"
// with Limit permits, on which workers call Acquire (instead of Lock or
// Do) and TryAcquire (instead of TryLock) in the sessions they pick, hold
// the permit and Unlock it, among the lock calls. Elections
// (Workload.Elections, names "<prefix>-e<i>") are read as semaphores of
// 1 whose permits are leaderships, taken by Campaign (instead of any
// call) with a value unique in the run; their keys are
// "<prefix>:e:{<name>}" and ":q", and their tokens must also rise
// in acquisition order (c). A permit is a Lock and is recorded as one
// (wcall, whold); the oracles read permits so:
//
// (a), (g) to (j): as for locks.
//
// (b) At most Limit holders at once: at every acquisition of a permit,
// fewer than Limit other holds of the name are running (a hold runs as
// for locks: until Unlock, the loss signal, or the start of the Close
// that ended it). "Loss before takeover" per permit: a holder told of its
// loss before the acquisition does not count.
//
// (c) Tokens of one semaphore are unique, and each is above the token of
// every acquisition of the name that returned more than a lease (the
// holder's session's) before its call began. Permits are concurrent and a
// grant reaches its session a moment after Redis issued it (one granted
// to a lingering slot, or kept for it, may be handed out up to a lease
// later): tokens rise in the order Redis issued them, not in the order
// calls returned.
//
// (d) No wait while a permit is free: for each Acquire call, the longest
// stretch of its wait during which fewer than Limit were busy holding
// (from the return of an acquisition to its release, as for locks) or
// waiting ahead of it (Acquire calls on the name that began before it and
// had not returned), outside fault windows (plus FaultGrace) and before
// its session's Close began, must not exceed Workload.WaitBound.
//
// (e) does not apply: a session's goroutines share its Limit permit
// slots, each queued in Redis on its own, so FIFO order among them is
// approximate (see baton.Semaphore).
//
// (f) Once a closed session's calls have returned, no holder field of
// the semaphore's hash "<prefix>:s:{<name>}" (an election's
// "<prefix>:e:{<name>}"), no live entry of its queue, and no election
// value "#v:<slot>" or pending mark "#p:<slot>" names one of the
// session's permit or campaign slots ("<member>.<slot>",
// "<member>.e<slot>"); once every Client closed, the hash holds only "#f"
// and "#l" and the queue key ":q" is gone (workload_leftovers.go). Only
// sessions a fault excuses (as for locks) and killed children may leave
// something, which lapses.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// semNames adds the semaphore names, then the election names, after the
// lock names.
func (r *wrun) semNames() error {
	for i, limit := range r.cfg.Semaphores {
		if limit < 1 || limit > baton.MaxSemaphoreLimit {
			return fmt.Errorf("checker: Workload.Semaphores[%d] = %d, want 1 to %d", i, limit, baton.MaxSemaphoreLimit)
		}
		r.names = append(r.names, fmt.Sprintf("%s-s%d", r.cfg.KeyPrefix, i))
		r.limits, r.elect = append(r.limits, limit), append(r.elect, false)
	}
	for i := range r.cfg.Elections {
		r.names = append(r.names, fmt.Sprintf("%s-e%d", r.cfg.KeyPrefix, i))
		r.limits, r.elect = append(r.limits, 1), append(r.elect, true)
	}
	return nil
}

// keyOf is the main key of name i: its lock key, or its semaphore's or
// election's hash.
func (r *wrun) keyOf(i int) string {
	switch {
	case r.elect[i]:
		return r.cfg.KeyPrefix + ":e:{" + r.names[i] + "}"
	case r.limits[i] > 0:
		return r.cfg.KeyPrefix + ":s:{" + r.names[i] + "}"
	}
	return r.lockKey(r.names[i])
}

// semOp is what semaphore or election name gets instead of op.
func (r *wrun) semOp(name int, op opKind) opKind {
	switch {
	case r.elect[name]:
		return opCampaign
	case op.try():
		return opTryAcquire
	}
	return opAcquire
}

// acquire makes call c: a Lock, TryLock, Acquire, TryAcquire or Campaign
// call on its name, a Campaign with c.value.
func (r *wrun) acquire(ctx context.Context, ws *wsession, c *wcall) (*baton.Lock, error) {
	op, name := c.op, c.name
	nm := r.names[name]
	switch op {
	case opTry:
		return ws.s.TryLock(ctx, nm)
	case opLock:
		return ws.s.Lock(ctx, nm)
	case opCampaign:
		e, err := ws.s.Election(nm)
		if err != nil {
			return nil, err
		}
		return e.Campaign(ctx, c.value)
	}
	m, err := ws.s.Semaphore(nm, r.limits[name])
	if err != nil {
		return nil, err
	}
	if op == opTryAcquire {
		return m.TryAcquire(ctx)
	}
	return m.Acquire(ctx)
}

// slotSession is the session member of a permit slot "<member>.<slot>".
func slotSession(field string) string {
	if i := strings.LastIndexByte(field, '.'); i > 0 {
		return field[:i]
	}
	return field
}

// permitHolders reads an HKEYS reply: the holder fields, sorted, joined
// by spaces.
func permitHolders(res rueidis.RedisResult) (string, error) {
	fields, err := res.AsStrSlice()
	if err != nil {
		return "", err
	}
	fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#") }) // "#f", "#l", an election's "#v:<slot>"
	slices.Sort(fields)
	return strings.Join(fields, " "), nil
}

// semaphore judges one semaphore's holds (sorted by acquisition) and
// waiters (sorted by start) by (b), (c) and (d); it returns the free
// stretch of every wait that had one. r.mu is held.
func (r *wrun) semaphore(rep *WorkloadReport, name, limit int, hs []*whold, ws []*wcall) []time.Duration {
	if r.elect[name] {
		rep.Leaderships += len(hs)
		r.tokens(rep, hs) // one leader at a time: tokens rise in acquisition order
	} else {
		rep.PermitAcquisitions += len(hs)
	}
	r.semOverlaps(rep, limit, hs)
	r.semTokens(rep, hs)
	r.semFIFO(rep, limit, hs, ws)
	return r.semIdle(name, limit, hs, ws)
}

// semOverlaps is (b). A holder an outside change hit counts as not
// holding once told of its loss in time (see toldInTime).
func (r *wrun) semOverlaps(rep *WorkloadReport, limit int, hs []*whold) {
	var active []*whold
	for _, b := range hs {
		active = slices.DeleteFunc(active, func(a *whold) bool { return !a.end().After(b.acquired) })
		rep.MaxPermits = max(rep.MaxPermits, len(active)+1)
		if len(active) >= limit {
			var held []*whold
			var late []*lateHold
			for _, a := range active {
				ok, l := r.toldInTime(rep, a, b)
				if l != nil {
					late = append(late, l)
				}
				if !ok {
					held = append(held, a)
				}
			}
			if len(held) >= limit {
				r.semOverlapLocked(rep, limit, held, b, r.noteLateLocked(rep, late))
			}
		}
		active = append(active, b)
	}
}

// semOverlapLocked records an overlap of (b): b acquired while the
// holds in held were running; late says which of them an outside change
// hit and who was told late. r.mu is held.
func (r *wrun) semOverlapLocked(rep *WorkloadReport, limit int, held []*whold, b *whold, late []string) {
	rep.Overlaps++
	for _, a := range held {
		if a.sess == b.sess {
			rep.OverlapsBetweenGoroutines++
			break
		}
	}
	others := make([]string, len(held))
	for i, a := range held {
		lost := "never"
		if l := a.lost(); !l.IsZero() {
			lost = r.at(l)
		}
		others[i] = fmt.Sprintf("%s (%s; loss signal %s)", r.holdText(a), r.endText(a), lost)
	}
	what := ""
	if len(late) > 0 {
		what = "; holders told late of an outside change: " + strings.Join(late, "; ")
	}
	r.failLocked(oOverlap, "%s (limit %d): %s acquired while %d others held a permit: %s%s",
		r.names[b.name], limit, r.holdText(b), len(held), strings.Join(others, "; "), what)
}

// semTokens is (c).
func (r *wrun) semTokens(rep *WorkloadReport, hs []*whold) {
	first := map[uint64]*whold{}
	top := make([]*whold, len(hs)) // top[i]: the highest token among hs[:i+1]
	for i, h := range hs {
		top[i] = h
		if i > 0 && top[i-1].token > h.token {
			top[i] = top[i-1]
		}
	}
	for _, b := range hs {
		if a := first[b.token]; a != nil {
			rep.TokenInversions++
			r.failLocked(oToken, "%s: %s DUPLICATE of %s", r.names[b.name], r.holdText(b), r.holdText(a))
			continue
		}
		first[b.token] = b
		i := sort.Search(len(hs), func(i int) bool { return !hs[i].acquired.Before(b.call.start.Add(-b.sess.lease)) })
		if i > 0 && top[i-1].token >= b.token {
			rep.TokenInversions++
			r.failLocked(oToken, "%s: %s not above %s, which returned more than a lease before that call began",
				r.names[b.name], r.holdText(b), r.holdText(top[i-1]))
		}
	}
}

// cover is an interval during which n permits count as taken; in the
// workload, hold or call is what takes them (neither: a fault window).
type cover struct {
	from, to time.Time
	n        int
	hold     *whold
	call     *wcall
}

// semIdle is (d) for one semaphore.
func (r *wrun) semIdle(name, limit int, hs []*whold, ws []*wcall) []time.Duration {
	busy := make([]cover, 0, len(hs))
	for _, h := range hs {
		busy = append(busy, cover{from: h.acquired, to: r.freeAfterChangeLocked(h), n: 1, hold: h})
	}
	var faults []cover
	for _, d := range r.deadWaitersLocked(name) {
		faults = append(faults, cover{from: d.from, to: d.to, n: 1})
	}
	for _, f := range r.faults {
		to := never
		if !f.to.IsZero() {
			to = f.to.Add(r.cfg.FaultGrace)
		}
		faults = append(faults, cover{from: f.from, to: to, n: limit})
	}
	end := func(c *wcall) time.Time {
		if c.end.IsZero() {
			return never
		}
		return c.end
	}
	var out []time.Duration
	var ahead []*wcall  // waiters that began earlier, in flight
	var running []cover // holds begun by the current waiter's start
	next := 0           // busy[next:] begin after it
	for _, w := range ws {
		for ; next < len(busy) && !busy[next].from.After(w.start); next++ {
			running = append(running, busy[next])
		}
		running = slices.DeleteFunc(running, func(c cover) bool { return !c.to.After(w.start) })
		ahead = slices.DeleteFunc(ahead, func(c *wcall) bool { return !end(c).After(w.start) })
		to := end(w)
		if cs := w.sess.closeStart; !cs.IsZero() && cs.Before(to) {
			to = cs
		}
		if to.After(w.start) && to.Before(never) {
			cs := slices.Concat(running, faults)
			for j := next; j < len(busy) && busy[j].from.Before(to); j++ {
				cs = append(cs, busy[j])
			}
			for _, a := range ahead {
				cs = append(cs, cover{from: a.start, to: end(a), n: 1, call: a})
			}
			if d, gs, ge := freeStretch(cs, limit, w.start, to); d > 0 {
				out = append(out, d)
				msg := func() string { return r.semIdleText(w, limit, cs, d, gs, ge) }
				switch {
				case d > r.cfg.WaitBound:
					r.failLocked(oIdle, "%s", msg())
				case d > r.cfg.WaitBound/4:
					r.nearIdle = append(r.nearIdle, idleCase{d, msg})
				}
			}
		}
		ahead = append(ahead, w)
	}
	return out
}

// freeStretch is the longest stretch [start, end] of [from, to] during
// which the covers add up to fewer than limit permits, and its length.
func freeStretch(cs []cover, limit int, from, to time.Time) (d time.Duration, start, end time.Time) {
	type event struct {
		t time.Time
		n int
	}
	n := 0
	var evs []event
	for _, c := range cs {
		if !c.to.After(from) || !c.from.Before(to) {
			continue
		}
		if c.from.After(from) {
			evs = append(evs, event{c.from, c.n})
		} else {
			n += c.n
		}
		if c.to.Before(to) {
			evs = append(evs, event{c.to, -c.n})
		}
	}
	// Ends before starts at one instant: a hand-over leaves no gap.
	slices.SortFunc(evs, func(x, y event) int {
		if c := x.t.Compare(y.t); c != 0 {
			return c
		}
		return x.n - y.n
	})
	free, since := n < limit, from
	for _, e := range evs {
		n += e.n
		switch now := n < limit; {
		case free && !now:
			if e.t.Sub(since) > d {
				d, start, end = e.t.Sub(since), since, e.t
			}
			free = false
		case !free && now:
			free, since = true, e.t
		}
	}
	if free && to.Sub(since) > d {
		d, start, end = to.Sub(since), since, to
	}
	return d, start, end
}

// semIdleText describes waiter w's free stretch [gs, ge] of length d.
func (r *wrun) semIdleText(w *wcall, limit int, cs []cover, d time.Duration, gs, ge time.Time) string {
	var holding, waiting []string
	for _, c := range cs {
		if !c.from.After(gs) && c.to.After(gs) {
			switch {
			case c.hold != nil:
				holding = append(holding, r.holdText(c.hold)+" ("+r.endText(c.hold)+")")
			case c.call != nil:
				waiting = append(waiting, fmt.Sprintf("%s by %s (called %s)", c.call.op, c.call.sess.label, r.at(c.call.start)))
			}
		}
	}
	outcome := "acquired token " + fmt.Sprint(w.hold.tokenOr())
	if w.hold == nil {
		outcome = cmp.Or(w.kind, "?") + ": " + w.errText
	}
	return fmt.Sprintf("%s (limit %d): %s by %s (called %s, timeout %v, returned %s: %s) waited %s while fewer than %d permits were busy or awaited ahead of it by the record: from %s to %s; as it began, holding: [%s], waiting ahead: [%s]. %s",
		r.names[w.name], limit, w.op, w.sess.label, r.at(w.start), w.timeout, r.at(w.end), outcome, ms(d), limit, r.at(gs), r.at(ge),
		strings.Join(holding, "; "), strings.Join(waiting, "; "), r.semRedisDuring(w.name, gs, ge))
}

// semRedisDuring describes what the sampler saw of a semaphore from from
// to to: its holders and queue before from and every change until to (at
// most 8). r.mu is held.
func (r *wrun) semRedisDuring(name int, from, to time.Time) string {
	if name >= len(r.samples) || len(r.samples[name]) == 0 {
		return "Redis: no samples"
	}
	ss := r.samples[name]
	var parts []string
	for i := max(stateAt(ss, from), 0); i < len(ss) && ss[i].sent.Before(to); i++ {
		if len(parts) == 8 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%s holders [%s], queue [%s]", r.at(ss[i].sent),
			strings.Join(r.slotLabelsLocked(strings.Fields(ss[i].value)), " "), strings.Join(r.slotLabelsLocked(ss[i].queue), " ")))
	}
	return "Redis (sampled every 10ms): " + strings.Join(parts, "; ")
}

// slotLabelsLocked names permit slots "<session label>/<slot>"; "?"
// begins an unknown one. r.mu is held.
func (r *wrun) slotLabelsLocked(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		m := slotSession(f)
		if ws := r.members[m]; ws != nil {
			out[i] = ws.label + "/" + strings.TrimPrefix(f, m+".")
		} else {
			out[i] = "?" + truncate(f)
		}
	}
	return out
}
