package checker

// The analysis of a workload run once every worker stopped: it groups the
// records by name and runs the oracles on them; (a) to (c) are here.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton"
)

// analyse judges the records; every worker has stopped.
func (r *wrun) analyse() WorkloadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := WorkloadReport{
		Seed:       r.cfg.Seed,
		Faults:     len(r.faults),
		Calls:      map[string]int{},
		Semaphores: r.cfg.Semaphores,
		Elections:  r.cfg.Elections,
	}
	r.countClosesLocked(&rep)
	holds, waiters := r.byNameLocked(&rep)
	idle := r.judgeNamesLocked(&rep, holds, waiters)
	r.idleStatsLocked(&rep, idle)
	r.cacheLocked(&rep, holds)
	rep.Bursts = r.bursts
	rep.MaxSamplerGap = r.sampleGap
	r.judgeObservedLocked(&rep)
	if len(r.clients) > 0 && uint64(rep.LossesSignalled) != rep.LostStats {
		// Stats.Lost counts exactly the losses callers were told of.
		r.failLocked(oLoss, "Stats.Lost summed over the Clients is %d, but %d losses were signalled to callers", rep.LostStats, rep.LossesSignalled)
	}
	r.childrenStatsLocked(&rep)
	rep.Changes, rep.MaxSubLag = r.changesText(), r.subLag
	rep.FinalKeys = r.swept
	rep.Failures, rep.Counts = r.fails, r.nfails
	if r.netAfterCtx > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d calls returned a network error after their own ctx had ended (allowed)", r.netAfterCtx))
	}
	for _, e := range r.scanErrs {
		rep.Notes = append(rep.Notes, "Redis scan after a Close failed: "+e)
	}
	return rep
}

// countClosesLocked fills the report's counts of Clients and Sessions
// made, of their Closes and the longest of each kind, and of the losses
// the Clients' Stats counted. The Stats are read now, once every worker is
// back: an Unlock in flight when its Client's Close began counts after it.
func (r *wrun) countClosesLocked(rep *WorkloadReport) {
	rep.Clients, rep.Sessions = len(r.clients), len(r.sessions)
	for _, cl := range r.clients {
		st := cl.c.Stats()
		rep.LostStats += st.Lost
		rep.CachedStats += st.Cached
	}
	for _, c := range r.closes {
		if c.what == "Session.Close" {
			rep.SessionCloses++
			rep.MaxSessionClose = max(rep.MaxSessionClose, c.dur)
		} else {
			rep.ClientCloses++
			rep.MaxClientClose = max(rep.MaxClientClose, c.dur)
		}
	}
}

// byNameLocked counts the calls and acquisitions in the report and groups
// them by name: the acquisitions (also kept in r.byName, for messages)
// and the calls that wait (Lock, Do, Acquire, Campaign), both unsorted.
func (r *wrun) byNameLocked(rep *WorkloadReport) (holds [][]*whold, waiters [][]*wcall) {
	holds = make([][]*whold, len(r.names))
	waiters = make([][]*wcall, len(r.names))
	for _, c := range r.calls {
		if c.sess.killed.IsZero() {
			rep.Calls[c.op.String()]++
		} else {
			rep.Calls["child "+c.op.String()]++
		}
		switch {
		case c.kind == "not-acquired":
			rep.TryLockBusy++
		case c.kind == "context" && !c.op.try():
			rep.CtxEnded++
		}
		if c.waits() {
			waiters[c.name] = append(waiters[c.name], c)
		}
	}
	for _, h := range r.holds {
		holds[h.name] = append(holds[h.name], h)
		// Told: Done closed with ErrLockLost, or Unlock (Do) said it.
		if !h.lost().IsZero() || h.sess.killed.IsZero() && errors.Is(h.unlockErr, baton.ErrLockLost) {
			rep.LossesSignalled++
		}
	}
	rep.Acquisitions = len(r.holds)
	r.setHowsLocked(rep)
	r.byName = holds
	return holds, waiters
}

// judgeNamesLocked sorts each name's acquisitions and waiting calls and
// runs the oracles on them: a lock's, or a semaphore's (and election's)
// in workload_semaphore.go. It returns the free stretch of every wait
// that had one (oracle (d)).
func (r *wrun) judgeNamesLocked(rep *WorkloadReport, holds [][]*whold, waiters [][]*wcall) []time.Duration {
	var idle []time.Duration
	for name := range r.names {
		hs := holds[name]
		slices.SortStableFunc(hs, func(x, y *whold) int { return x.acquired.Compare(y.acquired) })
		ws := waiters[name]
		slices.SortStableFunc(ws, func(x, y *wcall) int { return x.start.Compare(y.start) })
		r.losses(hs)
		if limit := r.limits[name]; limit > 0 {
			idle = append(idle, r.semaphore(rep, name, limit, hs, ws)...)
			continue
		}
		r.overlaps(rep, hs)
		r.tokens(rep, hs)
		idle = append(idle, r.idle(name, hs, ws)...)
		r.fifo(rep, hs, ws)
	}
	return idle
}

// idleStatsLocked summarises the free stretches of the waits in the
// report: their count and quantiles, and the three longest within the
// bound (WorkloadReport.NearIdle), to tell noise from near misses.
func (r *wrun) idleStatsLocked(rep *WorkloadReport, idle []time.Duration) {
	slices.SortFunc(r.nearIdle, func(x, y idleCase) int { return cmp.Compare(y.d, x.d) })
	for _, c := range r.nearIdle[:min(3, len(r.nearIdle))] {
		rep.NearIdle = append(rep.NearIdle, c.msg())
	}
	if len(idle) > 0 {
		slices.Sort(idle)
		rep.IdleWaits = len(idle)
		rep.IdleP50 = idle[len(idle)/2]
		rep.IdleP99 = idle[len(idle)*99/100]
		rep.IdleMax = idle[len(idle)-1]
	}
}

// holdText describes a hold for messages: its session, token, call and
// how baton says it was acquired (when the Observer told).
func (r *wrun) holdText(h *whold) string {
	op := h.call.op.String()
	if h.how != 0 {
		op += " " + h.how.String()
	}
	return fmt.Sprintf("%s token %d (%s, called %s, returned %s)", h.sess.label, h.token, op, r.at(h.call.start), r.at(h.acquired))
}

func (r *wrun) endText(h *whold) string {
	var parts []string
	if h.unlocked {
		u := "Unlock called " + r.at(h.unlockAt)
		if h.call.op == opDo {
			u = "fn returned " + r.at(h.unlockAt)
		}
		if !h.unlockRet.IsZero() {
			u += fmt.Sprintf(", returned %s (%v)", r.at(h.unlockRet), cmp.Or(Kind(h.unlockErr), "nil"))
		}
		parts = append(parts, u)
	}
	switch {
	case h.open:
		parts = append(parts, "Done never closed")
	case !h.doneAt.IsZero():
		parts = append(parts, fmt.Sprintf("Done closed %s (%v)", r.at(h.doneAt), h.cause))
	}
	return strings.Join(parts, "; ")
}

// next returns the first acquisition in hs (sorted) returned at or after t
// by another holder than h.
func next(hs []*whold, h *whold, t time.Time) *whold {
	i := sort.Search(len(hs), func(i int) bool { return !hs[i].acquired.Before(t) })
	for ; i < len(hs); i++ {
		if hs[i] != h {
			return hs[i]
		}
	}
	return nil
}

// losses is oracle (a) for one name's holds.
func (r *wrun) losses(hs []*whold) {
	excused := func(h *whold, t time.Time) bool {
		return r.faultAtLocked(t, t, h.sess.lease+r.cfg.FaultGrace) || r.hitByLocked(h, t, false) != nil
	}
	for _, h := range hs {
		nm := r.names[h.name]
		lost := h.lost()
		after := func(t time.Time) string {
			n := next(hs, h, t)
			if n == nil {
				return "no later acquisition"
			}
			return fmt.Sprintf("next acquisition %s after: %s", ms(n.acquired.Sub(t)), r.holdText(n))
		}
		switch {
		case !lost.IsZero():
			if excused(h, lost) {
				continue
			}
			early := ""
			if lost.Sub(h.acquired) < h.sess.lease/2 {
				early = " EARLY (before lease/2: no lease deadline explains it)"
			}
			r.failLocked(oLoss, "%s: %s lost %s after it returned%s; %s; %s",
				nm, r.holdText(h), ms(lost.Sub(h.acquired)), early, r.endText(h), after(lost))
		case errors.Is(h.unlockErr, baton.ErrLockLost) || errors.Is(h.errAtEnd, baton.ErrLockLost):
			if excused(h, h.unlockRet) {
				continue
			}
			r.failLocked(oLoss, "%s: %s: ErrLockLost from Unlock/Do/Err though Done never said so; %s; %s",
				nm, r.holdText(h), r.endText(h), after(h.unlockAt))
		case h.doneAt.IsZero() || (h.unlocked && !h.doneAt.Before(h.unlockAt)):
			// Done closed by Unlock, or never (judged by (f)).
		case h.closed():
			if cs := h.sess.closeStart; cs.IsZero() || cs.After(h.doneAt) {
				r.failLocked(oLoss, "%s: %s: Done closed with ErrClosed at %s though no Close of %s had begun (%s); %s",
					nm, r.holdText(h), r.at(h.doneAt), h.sess.label, r.at(cs), r.endText(h))
			}
		default:
			if excused(h, h.doneAt) {
				continue
			}
			r.failLocked(oLoss, "%s: %s: Done closed %s before Unlock, cause %v; %s",
				nm, r.holdText(h), r.at(h.doneAt), h.cause, r.endText(h))
		}
	}
}

// overlaps is oracle (b) for one name's holds (sorted by acquisition).
func (r *wrun) overlaps(rep *WorkloadReport, hs []*whold) {
	var active []*whold
	for _, b := range hs {
		active = slices.DeleteFunc(active, func(a *whold) bool { return !a.end().After(b.acquired) })
		for _, a := range active {
			old, newer := a, b
			if b.token < a.token && r.hitByLocked(b, b.acquired, false) != nil {
				// A grant issued before an outside change reached its
				// caller after another took the emptied name afresh: the
				// stale holder is the one with the older token.
				old, newer = b, a
			}
			excused, late := r.toldInTime(rep, old, newer)
			if excused {
				continue
			}
			rep.Overlaps++
			if a.sess == b.sess {
				rep.OverlapsBetweenGoroutines++
			}
			if late != nil {
				if msgs := r.noteLateLocked(rep, []*lateHold{late}); len(msgs) > 0 {
					r.failLocked(oOverlap, "%s: holder told late of an outside change: %s", r.names[b.name], msgs[0])
				} else {
					r.nfails[oOverlap]++ // the same old holder, reported already
				}
				continue
			}
			lost := "never"
			if l := a.lost(); !l.IsZero() {
				lost = r.at(l)
			}
			r.failLocked(oOverlap, "%s: %s acquired while %s still held it (%s; loss signal %s)",
				r.names[b.name], r.holdText(b), r.holdText(a), r.endText(a), lost)
		}
		active = append(active, b)
	}
}

// tokens is oracle (c).
func (r *wrun) tokens(rep *WorkloadReport, hs []*whold) {
	var top *whold
	for _, h := range hs {
		// A grant issued before an outside change of the key may reach
		// its caller after another took the emptied name afresh: the
		// change broke the lock from outside (see workload_outside.go).
		if top != nil && h.token < top.token && r.hitByLocked(h, h.acquired, false) != nil {
			continue
		}
		if top != nil && h.token <= top.token {
			rep.TokenInversions++
			what := "after"
			if h.token == top.token {
				what = "DUPLICATE of"
			}
			r.failLocked(oToken, "%s: %s %s %s", r.names[h.name], r.holdText(h), what, r.holdText(top))
		}
		if top == nil || h.token > top.token {
			top = h
		}
	}
}
