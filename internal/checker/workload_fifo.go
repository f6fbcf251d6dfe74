package checker

// Oracle (e), FIFO between sessions: the turns sessions began during
// each wait.

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"time"
)

// fifoJudgedLocked says whether (e) judges waiter w: it returned, was
// not a child's killed while waiting, and its wait met neither its
// session's Close nor a fault window nor an outside change of its name
// (plus grace). r.mu is held.
func (r *wrun) fifoJudgedLocked(w *wcall) bool {
	if w.end.IsZero() || w.kind == killedKind {
		return false
	}
	if cs := w.sess.closeStart; !cs.IsZero() && cs.Before(w.end) {
		return false
	}
	return !r.faultAtLocked(w.start, w.end, r.cfg.FaultGrace) && !r.changeAtLocked(w.name, w.start, w.end)
}

// fifo is oracle (e) for one name.
func (r *wrun) fifo(rep *WorkloadReport, hs []*whold, ws []*wcall) {
	turns := turnsOf(hs)
	longest := longestWait(ws)
	for i, w := range ws {
		if !r.fifoJudgedLocked(w) {
			continue
		}
		n := aheadOf(ws, i, longest) // other waiters in flight when w started
		count, own, worst := turnsDuring(turns, w)
		if worst == nil {
			continue
		}
		rep.MaxTurns = max(rep.MaxTurns, count[worst])
		limit := n + 1 + r.cfg.FIFOSlack
		if count[worst] <= limit {
			continue
		}
		r.fifoFailLocked(w, count, own, worst, n, limit)
	}
}

// turn is when a session began a turn on a name: a maximal run of
// consecutive acquisitions of the name by that session.
type turn struct {
	sess *wsession
	at   time.Time
	hold *whold
}

// turnsOf returns the turns in one name's holds (sorted by acquisition),
// in order.
func turnsOf(hs []*whold) []turn {
	var turns []turn
	for _, h := range hs {
		// Consecutive acquisitions by one session (local hand-offs, or a
		// re-acquisition nobody else wanted) are one turn.
		if n := len(turns); n == 0 || turns[n-1].sess != h.sess {
			turns = append(turns, turn{h.sess, h.acquired, h})
		}
	}
	return turns
}

// waitEnd is when a waiting call returned; never while it is in flight.
func waitEnd(c *wcall) time.Time {
	if c.end.IsZero() {
		return never
	}
	return c.end
}

// longestWait is the longest wait in ws, one still in flight counted until
// now: aheadOf need look no further back than that for waiters in flight.
func longestWait(ws []*wcall) time.Duration {
	var longest time.Duration
	for _, c := range ws {
		if e := waitEnd(c); e.Before(never) {
			longest = max(longest, e.Sub(c.start))
		} else {
			longest = max(longest, time.Since(c.start))
		}
	}
	return longest
}

// aheadOf counts the other waiters in flight when ws[i] started (ws sorted
// by start, longest the longest wait among them): those that started
// before it and had not returned, and those that started at the same time.
func aheadOf(ws []*wcall, i int, longest time.Duration) int {
	w := ws[i]
	n := 0
	for j := i - 1; j >= 0 && !ws[j].start.Before(w.start.Add(-longest)); j-- {
		if waitEnd(ws[j]).After(w.start) {
			n++
		}
	}
	for j := i + 1; j < len(ws) && ws[j].start.Equal(w.start); j++ {
		n++
	}
	return n
}

// turnsDuring counts the turns sessions began during w's wait: own those
// of w's session, count those of every other session, and worst the
// other session that began the most (the first to reach that count; nil
// if none began any).
func turnsDuring(turns []turn, w *wcall) (count map[*wsession]int, own int, worst *wsession) {
	first := sort.Search(len(turns), func(k int) bool { return turns[k].at.After(w.start) })
	count = map[*wsession]int{}
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
	return count, own, worst
}

// fifoFailLocked records a breach of oracle (e): during w's wait, worst
// began count[worst] turns, above limit (n waiters in flight when w
// started + 1 + Workload.FIFOSlack). It describes the other sessions'
// turns and how long Redis had w's session queued. r.mu is held.
func (r *wrun) fifoFailLocked(w *wcall, count map[*wsession]int, own int, worst *wsession, n, limit int) {
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

// semFIFO is (e) for one semaphore or election (limit 1): during each
// Acquire or Campaign wait W, count for every other session the permits
// it took with calls begun after W's. Sessions queue in FIFO order in
// Redis, and a session's permits go to its waiters in about FIFO order,
// so such a session is served before W only through a queue entry older
// than W's: one of its permit slots queued or lingering in the queue
// (at most limit) each time a permit goes to one of the k waiters of W's
// session ahead of W, or before W's (k + 1 times), plus an attempt that
// reached Redis before W's first one. More than limit x (k + 1) + 1 +
// FIFOSlack fails: W was left behind.
func (r *wrun) semFIFO(rep *WorkloadReport, limit int, hs []*whold, ws []*wcall) {
	longest := longestWait(ws)
	for i, w := range ws {
		if !r.fifoJudgedLocked(w) {
			continue
		}
		k := ownAhead(ws, i, longest)
		count := map[*wsession]int{}
		var worst *wsession
		i := sort.Search(len(hs), func(i int) bool { return hs[i].acquired.After(w.start) })
		for ; i < len(hs) && hs[i].acquired.Before(w.end); i++ {
			b := hs[i]
			if b.sess == w.sess || !b.call.start.After(w.start) {
				continue
			}
			count[b.sess]++
			if worst == nil || count[b.sess] > count[worst] {
				worst = b.sess
			}
		}
		if worst == nil {
			continue
		}
		rep.MaxOvertakes = max(rep.MaxOvertakes, count[worst])
		if bound := limit*(k+1) + 1 + r.cfg.FIFOSlack; count[worst] > bound {
			outcome := "acquired token " + fmt.Sprint(w.hold.tokenOr())
			if w.hold == nil {
				outcome = w.kind
			}
			r.failLocked(oFIFO, "%s (limit %d): %s by %s (called %s, timeout %v, returned %s after %s: %s): %s took %d permits meanwhile with calls begun after it (bound %d = limit x (%d of its session ahead + 1) + 1 + slack %d). %s",
				r.names[w.name], limit, w.op, w.sess.label, r.at(w.start), w.timeout, r.at(w.end), ms(w.end.Sub(w.start)), outcome,
				worst.label, count[worst], bound, k, r.cfg.FIFOSlack, r.semRedisDuring(w.name, w.start, w.end))
		}
	}
}

// ownAhead counts the waiters of ws[i]'s session in flight when it
// started (ws sorted by start, longest the longest wait among them).
func ownAhead(ws []*wcall, i int, longest time.Duration) int {
	w := ws[i]
	n := 0
	for j := i - 1; j >= 0 && !ws[j].start.Before(w.start.Add(-longest)); j-- {
		if ws[j].sess == w.sess && waitEnd(ws[j]).After(w.start) {
			n++
		}
	}
	for j := i + 1; j < len(ws) && ws[j].start.Equal(w.start); j++ {
		if ws[j].sess == w.sess {
			n++
		}
	}
	return n
}
