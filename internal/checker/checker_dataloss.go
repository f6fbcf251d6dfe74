package checker

// Overlaps across a data loss (Config.DataLoss): Redis restarted empty
// or flushed while holders held, and Control.DataLoss marked it. Without
// Config.TellBound every such overlap is excused; with it, only one whose
// earlier holder heard of the loss in time (see excused); the others
// count as overlaps, with a message per old holder.

import (
	"fmt"
	"time"
)

// excused says whether the overlap of earlier holder a with later holder
// b spans a data-loss window (a returned before it ended, or TellBound
// after, b after it began) and is excused. With Config.TellBound, a must
// have been told of its loss (Done closed with ErrLockLost), or have
// ended with Unlock saying ErrLockLost, by the later of b's acquisition
// and a's first check (Config.FirstCheck after it acquired, if the window
// began before that), plus TellBound; ending with Unlock saying
// ErrLockLost counts only for such a young hold, which hears of a change
// at its first check or its end. If it was not told in time, late says
// what to report should the overlap count (see noteLate).
func (r *run) excused(rep *Report, a, b *acq) (ok bool, late *lateAcq) {
	if !r.cfg.DataLoss {
		return false, nil
	}
	for _, w := range r.losses {
		to := w.to
		if to.IsZero() {
			to = b.acquired.Add(time.Hour)
		}
		// What a got may be what Redis lost: a grant made before, returned after.
		if a.acquired.After(to.Add(r.cfg.TellBound)) || !b.acquired.After(w.from) {
			continue
		}
		if r.cfg.TellBound <= 0 {
			return true, nil
		}
		return r.toldInTime(rep, a, b, w)
	}
	return false, nil
}

// lateAcq is a holder that heard late of a data loss, and what to say.
type lateAcq struct {
	a         *acq
	kind, msg string
}

// toldInTime is excused's judgement with Config.TellBound.
func (r *run) toldInTime(rep *Report, a, b *acq, w window) (bool, *lateAcq) {
	due := b.acquired
	first := a.acquired.Add(r.cfg.FirstCheck)
	young := w.from.Before(first) // not tracked yet: it hears at its first check or its end
	if young && first.After(due) {
		due = first
	}
	due = due.Add(r.cfg.TellBound)
	if !a.lost.IsZero() {
		rep.MaxTellLag = max(rep.MaxTellLag, a.lost.Sub(b.acquired))
	}
	if !a.lost.IsZero() && !a.lost.After(due) || young && a.lost.IsZero() && a.unlockKind == "lost" && !a.unlockAt.After(due) {
		rep.ToldInTime++
		return true, nil
	}
	kind := kindOf(r, a)
	if a.acquired.After(w.from) {
		kind += " returned after the loss began" // a grant made before it, or a hold it missed
	}
	told := "never told"
	if !a.lost.IsZero() {
		told = fmt.Sprintf("told of its loss %v after that", a.lost.Sub(b.acquired).Round(10*time.Microsecond))
	}
	return false, &lateAcq{a: a, kind: kind, msg: fmt.Sprintf("%s: data loss t=%v..%v while client %d held token %d (%s, acquired t=%v); client %d acquired token %d at t=%v; the old holder was %s, due by t=%v (TellBound %v, FirstCheck %v); its Unlock at t=%v: %s",
		a.name, r.rel(w.from), r.rel(w.to), a.client, a.token, kind, r.rel(a.acquired), b.client, b.token, r.rel(b.acquired),
		told, r.rel(due), r.cfg.TellBound, r.cfg.FirstCheck, r.rel(a.unlockAt), cmpOr(a.unlockKind, "nil"))}
}

// noteLate records the late holders of an overlap that counts: in rep's
// counts, and each old holder's message once.
func (r *run) noteLate(rep *Report, late []*lateAcq) {
	for _, l := range late {
		rep.ToldLate++
		if r.toldLate[l.a] {
			continue
		}
		if r.toldLate == nil {
			r.toldLate, rep.LateHolders = map[*acq]bool{}, map[string]int{}
		}
		r.toldLate[l.a] = true
		rep.LateHolders[l.kind]++
		if len(rep.failures) < 30 {
			rep.failures = append(rep.failures, l.msg)
		}
	}
}

// kindOf names what a holds: a lock, a permit or a leadership.
func kindOf(r *run, a *acq) string {
	switch {
	case r.elect[a.name]:
		return "leader"
	case a.limit > 0:
		return "permit"
	}
	return "lock"
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
