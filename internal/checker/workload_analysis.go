package checker

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

// WorkloadReport is what a RunWorkload run saw. Print it with String;
// Check lists the failures, by oracle. Every time is taken in this process
// (time.Now, monotonic) and printed relative to the start of the run.
//
// The oracles:
//
// (a) No loss without a fault. A loss is a Lock whose Done closed with a
// cause matching baton.ErrLockLost (seen by context.AfterFunc on its
// Context), an Unlock or Do returning ErrLockLost, or a Done that closed
// before Unlock for any reason other than a Close that had begun (a cause
// of ErrClosed with no Close begun, or any other cause). A loss is excused
// only when it came during a fault window (WorkloadControl.Fault) or
// within the holder's lease + Workload.FaultGrace after one. A loss sooner
// than lease/2 after the acquisition is marked EARLY: no lease deadline can
// explain it.
//
// (b) No overlap not preceded by a loss signal. A hold runs from when Lock
// returned (or Do's fn began) to the earliest of: Unlock called (or fn
// returned), the loss signal, or the start of the Close that ended it (Done
// closed with ErrClosed; Close closes Done before it releases the key).
// Another acquisition of the name inside that span is an overlap. A lock
// whose Done never closed is held forever.
//
// (c) Tokens rise per name: in the order acquisitions returned to their
// callers, every token is above every earlier one.
//
// (d) No idle wait. For each waiter (a Lock or Do call on a name) it
// measures the longest stretch of its wait during which (1) nobody held the
// name: no acquisition of it was between its return and its release, where
// a release is when Unlock returned nil, or when the Close that ended the
// lock returned, or, after a loss or a failed release, a lease of the
// holder later (the key may stay until it expires); (2) nobody was waiting
// ahead of it: every Lock or Do call on the name that started before it had
// returned; (3) its own session's (or Client's) Close had not begun; and
// (4) no fault window (plus FaultGrace) was open. That stretch must not
// exceed Workload.WaitBound (default 100 ms). It includes the time from the
// grant in Redis to the return of Lock (delivery and scheduling), so under
// -race on a busy machine the bound has to carry scheduling noise too.
//
// (e) FIFO between sessions. For each waiter W on a name, count for every
// other session the turns it began during the wait (a turn is a maximal run
// of consecutive acquisitions of the name by one session: local hand-offs
// inside a turn count once). Fails if some session began more than
// N + 1 + FIFOSlack turns, where N is the number of other Lock and Do calls
// on the name in flight when W started: with FIFO between sessions in
// Redis, a session gets at most one turn between two turns of W's session,
// and W's session has at most N goroutines ahead of W. Waits that meet a
// fault window (plus grace) or the Close of W's session are not judged.
//
// (f) Nothing survives a Close. When Session.Close or Client.Close
// returns, every Lock the session(s) ever returned has Done closed, and a
// Lock call returning afterwards returns no live lock; once the session's
// calls in flight have returned, no lock key in Redis names it as owner
// and no live queue entry (deadline not past) names it; after every Client
// closed, no lock key names any owner (a value not beginning with "~") and
// no live queue entry is left. The Redis part excuses only a session with a
// fault window (plus grace) within its lease before its Close, or during
// it: a call lost to the fault leaves what lapses within the lease.
//
// (g) Every Session.Close and Client.Close returns within
// Workload.CloseBound (default the longest lease + 1 s).
//
// (h) No goroutine is left behind (goleak).
//
// (i) Errors: only documented ones. Lock/Do: ctx errors when their ctx
// ended, ErrClosed once their session's Close began, Redis or network
// errors only in fault windows (plus grace); TryLock also ErrNotAcquired,
// and a network error once its own ctx had ended (a dial or read cut short
// by it; counted in a note); Unlock: ErrLockLost (judged by (a)), ErrClosed
// or ErrUnlocked once a Close began, ctx errors when its ctx ended. A ctx
// error while the ctx had not ended (its deadline still 1 ms or more ahead
// when the call returned, and not cancelled) is a failure, and so is a Lock
// that returns a lock already ended by a Close.
//
// (j) No call hangs: every call returns once the Clients closed.
//
// Semaphore and election names (Workload.Semaphores, Workload.Elections)
// are judged by (a) and (g) to (j) as locks are, permits and leaderships
// as locks, and by (b) to (d) and (f) as workload_semaphore.go says: at
// most Limit holders (one leader) at once, unique tokens above every token
// returned before the call began, no wait while fewer than Limit hold and
// wait ahead, nothing of a closed session left in their hashes and
// queues; (e) does not apply to them.
type WorkloadReport struct {
	Seed    uint64
	Elapsed time.Duration
	Faults  int // fault windows

	Clients, Sessions int            // made during the run
	Calls             map[string]int // by operation
	Acquisitions      int
	TryLockBusy       int
	CtxEnded          int // Lock and Do calls ended by their ctx
	LossesSignalled   int
	LostStats         uint64 // sum of Client.Stats().Lost at Close

	SessionCloses, ClientCloses     int
	MaxSessionClose, MaxClientClose time.Duration

	IdleWaits                 int           // waits with a free stretch (d) above zero
	IdleP50, IdleP99, IdleMax time.Duration // of those stretches
	MaxTurns                  int           // most turns one session began during one wait (e)
	OverlapsBetweenGoroutines int           // of the overlaps, inside one session
	TokenInversions, Overlaps int

	Semaphores         []int // limits of the semaphore names
	PermitAcquisitions int   // of the acquisitions, permits
	MaxPermits         int   // most holders of one semaphore (or election) at once, by the record (b)
	Elections          int   // election names
	Leaderships        int   // of the acquisitions, leaderships

	Failures map[string][]string // by oracle, the first messages
	Counts   map[string]int      // by oracle, all failures
	Leaked   string
	Notes    []string
	// NearIdle describes the three longest idle stretches (d) within the
	// bound (above a quarter of it), to tell noise from near misses.
	NearIdle []string
}

// Check returns the run's failures, or nil.
func (r WorkloadReport) Check() error {
	var b strings.Builder
	if r.Acquisitions == 0 {
		b.WriteString("no acquisitions: the run checked nothing\n")
	}
	if len(r.Semaphores) > 0 && r.PermitAcquisitions == 0 {
		b.WriteString("no permit acquired: the semaphores were not checked\n")
	}
	if r.Elections > 0 && r.Leaderships == 0 {
		b.WriteString("no leadership: the elections were not checked\n")
	}
	for _, o := range oracleOrder {
		if r.Counts[o] == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: %d failures\n", o, r.Counts[o])
		for _, m := range r.Failures[o] {
			fmt.Fprintf(&b, "    %s\n", m)
		}
		if n := r.Counts[o] - len(r.Failures[o]); n > 0 {
			fmt.Fprintf(&b, "    ... and %d more\n", n)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return errors.New("checker: workload:\n" + b.String())
}

// Failed lists the oracles that failed.
func (r WorkloadReport) Failed() []string {
	var out []string
	for _, o := range oracleOrder {
		if r.Counts[o] > 0 {
			out = append(out, o)
		}
	}
	return out
}

// String summarises the report.
func (r WorkloadReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v, %d fault windows; %d clients and %d sessions made\n",
		r.Seed, r.Elapsed.Round(time.Millisecond), r.Faults, r.Clients, r.Sessions)
	fmt.Fprintf(&b, "calls %v: %d acquisitions, %d TryLock busy, %d Lock/Do ended by their ctx; losses signalled %d (Stats.Lost %d)\n",
		fmtMap(r.Calls), r.Acquisitions, r.TryLockBusy, r.CtxEnded, r.LossesSignalled, r.LostStats)
	fmt.Fprintf(&b, "closes: %d Session.Close (max %s), %d Client.Close (max %s)\n",
		r.SessionCloses, ms(r.MaxSessionClose), r.ClientCloses, ms(r.MaxClientClose))
	fmt.Fprintf(&b, "idle waits (d): %d waits with a free stretch, p50 %s, p99 %s, max %s; most turns of one session in one wait (e): %d\n",
		r.IdleWaits, ms(r.IdleP50), ms(r.IdleP99), ms(r.IdleMax), r.MaxTurns)
	if len(r.Semaphores) > 0 || r.Elections > 0 {
		fmt.Fprintf(&b, "semaphores %v: %d permits acquired; elections %d: %d leaderships; at most %d holders of one at once\n",
			r.Semaphores, r.PermitAcquisitions, r.Elections, r.Leaderships, r.MaxPermits)
	}
	fmt.Fprintf(&b, "overlaps %d (inside one session %d), token inversions %d", r.Overlaps, r.OverlapsBetweenGoroutines, r.TokenInversions)
	if f := r.Failed(); len(f) > 0 {
		fmt.Fprintf(&b, "\nFAILED: %s", strings.Join(f, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s", n)
	}
	for _, n := range r.NearIdle {
		fmt.Fprintf(&b, "\nidle wait within the bound: %s", n)
	}
	return b.String()
}

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
	rep.Clients, rep.Sessions = len(r.clients), len(r.sessions)
	for _, cl := range r.clients {
		rep.LostStats += cl.stats.Lost
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
	holds := make([][]*whold, len(r.names))
	waiters := make([][]*wcall, len(r.names))
	for _, c := range r.calls {
		rep.Calls[c.op.String()]++
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
		if !h.lost().IsZero() {
			rep.LossesSignalled++
		}
	}
	rep.Acquisitions = len(r.holds)
	r.byName = holds
	var idle []time.Duration
	for name := range r.names {
		hs := holds[name]
		slices.SortStableFunc(hs, func(x, y *whold) int { return x.acquired.Compare(y.acquired) })
		ws := waiters[name]
		slices.SortStableFunc(ws, func(x, y *wcall) int { return x.start.Compare(y.start) })
		r.losses(hs)
		if limit := r.limits[name]; limit > 0 {
			idle = append(idle, r.semaphore(&rep, limit, hs, ws)...)
			continue
		}
		r.overlaps(&rep, hs)
		r.tokens(&rep, hs)
		idle = append(idle, r.idle(hs, ws)...)
		r.fifo(&rep, hs, ws)
	}
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
	rep.Failures, rep.Counts = r.fails, r.nfails
	if r.netAfterCtx > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d calls returned a network error after their own ctx had ended (allowed)", r.netAfterCtx))
	}
	for _, e := range r.scanErrs {
		rep.Notes = append(rep.Notes, "Redis scan after a Close failed: "+e)
	}
	return rep
}

// holdText describes a hold for messages.
func (r *wrun) holdText(h *whold) string {
	return fmt.Sprintf("%s token %d (%s, called %s, returned %s)", h.sess.label, h.token, h.call.op, r.at(h.call.start), r.at(h.acquired))
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
	excused := func(h *whold, t time.Time) bool { return r.faultAtLocked(t, t, h.sess.lease+r.cfg.FaultGrace) }
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
			rep.Overlaps++
			if a.sess == b.sess {
				rep.OverlapsBetweenGoroutines++
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

// idle is oracle (d) for one name; it returns the free stretch of every
// wait that had one.
func (r *wrun) idle(hs []*whold, ws []*wcall) []time.Duration {
	var busy []span
	for _, h := range hs {
		busy = append(busy, span{from: h.acquired, to: h.busyUntil(), hold: h})
	}
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

func (h *whold) tokenOr() uint64 {
	if h == nil {
		return 0
	}
	return h.token
}

// fifo is oracle (e) for one name.
func (r *wrun) fifo(rep *WorkloadReport, hs []*whold, ws []*wcall) {
	type turn struct {
		sess *wsession
		at   time.Time
		hold *whold
	}
	var turns []turn
	for _, h := range hs {
		// Consecutive acquisitions by one session (local hand-offs, or a
		// re-acquisition nobody else wanted) are one turn.
		if n := len(turns); n == 0 || turns[n-1].sess != h.sess {
			turns = append(turns, turn{h.sess, h.acquired, h})
		}
	}
	var longest time.Duration
	end := func(c *wcall) time.Time {
		if c.end.IsZero() {
			return never
		}
		return c.end
	}
	for _, c := range ws {
		if e := end(c); e.Before(never) {
			longest = max(longest, e.Sub(c.start))
		} else {
			longest = max(longest, time.Since(c.start))
		}
	}
	for i, w := range ws {
		if w.end.IsZero() {
			continue
		}
		if cs := w.sess.closeStart; !cs.IsZero() && cs.Before(w.end) {
			continue
		}
		if r.faultAtLocked(w.start, w.end, r.cfg.FaultGrace) {
			continue
		}
		n := 0 // other waiters in flight when w started
		for j := i - 1; j >= 0 && !ws[j].start.Before(w.start.Add(-longest)); j-- {
			if end(ws[j]).After(w.start) {
				n++
			}
		}
		for j := i + 1; j < len(ws) && ws[j].start.Equal(w.start); j++ {
			n++
		}
		first := sort.Search(len(turns), func(k int) bool { return turns[k].at.After(w.start) })
		count := map[*wsession]int{}
		var own int
		var worst *wsession
		for k := first; k < len(turns) && turns[k].at.Before(w.end); k++ {
			s := turns[k].sess
			if s == w.sess {
				own++
				continue
			}
			count[s]++
			if worst == nil || count[s] > count[worst] {
				worst = s
			}
		}
		if worst == nil {
			continue
		}
		rep.MaxTurns = max(rep.MaxTurns, count[worst])
		limit := n + 1 + r.cfg.FIFOSlack
		if count[worst] <= limit {
			continue
		}
		var others []string
		for s, k := range count {
			if s != worst {
				others = append(others, fmt.Sprintf("%s %d", s.label, k))
			}
		}
		sort.Strings(others)
		outcome := "acquired token " + fmt.Sprint(w.hold.tokenOr())
		if w.hold == nil {
			outcome = w.kind
		}
		queued := "unknown"
		if q := r.queuedShare(w.name, w.sess, w.start, w.end); q >= 0 {
			queued = fmt.Sprintf("%.0f%% of the wait", 100*q)
		}
		r.failLocked(oFIFO, "%s: %s by %s (called %s, timeout %v, returned %s after %s: %s): %s began %d turns meanwhile (limit %d = %d waiters in flight at its start + 1 + slack %d); its own session %d turns; others: %s; its session queued (or owner) in Redis: %s",
			r.names[w.name], w.op, w.sess.label, r.at(w.start), w.timeout, r.at(w.end), ms(w.end.Sub(w.start)), outcome,
			worst.label, count[worst], limit, n, r.cfg.FIFOSlack, own, cmp.Or(strings.Join(others, ", "), "none"), queued)
	}
}

// stateAt is the last sample of a name read before t, or nil.
func stateAt(ss []sample, t time.Time) int {
	return sort.Search(len(ss), func(i int) bool { return ss[i].got.After(t) }) - 1
}

// ownerText names the owner a lock value of name gives at t ("free" for a
// marker), and whether the record has that session holding the name then:
// a key held by a session that holds nothing is orphaned (or a grant
// nobody has taken up yet).
func (r *wrun) ownerText(name int, v string, t time.Time, detail bool) string {
	switch {
	case v == "":
		return "no key"
	case strings.HasPrefix(v, "~"):
		return "free"
	}
	m := v
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		m = v[:i]
	}
	text := "held by " + r.sessionText(m, t)
	if ws := r.members[m]; ws != nil && name < len(r.byName) {
		for _, h := range r.byName[name] {
			if h.sess == ws && !h.acquired.After(t) && h.busyUntil().After(t) {
				return text + " (holding it by the record)"
			}
		}
		text += " (holding NOTHING by the record"
		var last *whold
		for _, h := range r.byName[name] {
			if h.sess == ws && !h.acquired.After(t) {
				last = h
			}
		}
		if last != nil && detail {
			text += "; its last hold: token " + fmt.Sprint(last.token) + ", " + r.endText(last)
			if last.unlockTimeout > 0 && last.unlockTimeout < time.Millisecond+50*time.Microsecond {
				text += ", Unlock ctx " + last.unlockTimeout.String()
			}
		}
		return text + ")"
	}
	return text
}

// sessionText names a member, saying whether its session had closed by t
// and whether anyone in it held the name by the record.
func (r *wrun) sessionText(m string, t time.Time) string {
	ws := r.members[m]
	if ws == nil {
		return "?" + truncate(m)
	}
	if !ws.closeStart.IsZero() && ws.closeStart.Before(t) {
		return fmt.Sprintf("%s (%s %s)", ws.label, ws.closedBy, r.at(ws.closeStart))
	}
	return ws.label
}

// redisDuring describes what the sampler saw of a name from from to to:
// the state before from and every change until to (at most 8).
func (r *wrun) redisDuring(name int, from, to time.Time) string {
	if name >= len(r.samples) || len(r.samples[name]) == 0 {
		return "Redis: no samples"
	}
	ss := r.samples[name]
	i := max(stateAt(ss, from), 0)
	var parts []string
	described := map[string]bool{}
	for ; i < len(ss) && ss[i].sent.Before(to); i++ {
		if len(parts) == 8 {
			parts = append(parts, "...")
			break
		}
		q := "empty"
		if len(ss[i].queue) > 0 {
			q = "[" + strings.Join(r.labelsLocked(ss[i].queue), " ") + "]"
		}
		at := ss[i].sent
		if at.Before(from) {
			at = from // the state as the stretch began
		}
		parts = append(parts, fmt.Sprintf("%s %s, queue %s", r.at(ss[i].sent), r.ownerText(name, ss[i].value, at, !described[ss[i].value]), q))
		described[ss[i].value] = true
	}
	return "Redis (sampled every 10ms): " + strings.Join(parts, "; ")
}

// queuedShare is the share of [from, to] in which the sampler saw ws in a
// name's queue or as its owner; -1 if ws is unknown or nothing was sampled.
func (r *wrun) queuedShare(name int, ws *wsession, from, to time.Time) float64 {
	if name >= len(r.samples) || ws.member == "" || len(r.samples[name]) == 0 || !to.After(from) {
		return -1
	}
	ss := r.samples[name]
	in := time.Duration(0)
	i, t := stateAt(ss, from), from
	for t.Before(to) {
		next := to
		if i+1 < len(ss) && ss[i+1].sent.Before(to) {
			next = ss[i+1].sent
			if next.Before(t) {
				next = t
			}
		}
		if i >= 0 && (slices.Contains(ss[i].queue, ws.member) || strings.HasPrefix(ss[i].value, ws.member+":")) {
			in += next.Sub(t)
		}
		t = next
		i++
	}
	return float64(in) / float64(to.Sub(from))
}
