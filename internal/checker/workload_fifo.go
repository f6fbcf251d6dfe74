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

// fifo is oracle (e) for one name.
func (r *wrun) fifo(rep *WorkloadReport, hs []*whold, ws []*wcall) {
	turns := turnsOf(hs)
	longest := longestWait(ws)
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
