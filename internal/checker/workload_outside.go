package checker

// Outside changes of a workload run: a DEL of held keys, a FLUSHALL or a
// restart without persistence, made by the fault function and marked with
// WorkloadControl.Outside, and how the oracles read them:
//
//   - (a) excuses the loss of a hold the change hit;
//   - (b) excuses an overlap whose earlier holder the change hit only if
//     that holder was told of its loss (Done closed with ErrLockLost) by
//     when it is due to hear of it: Workload.TellBound after the later
//     holder returned (a holder hears of a change of its key at once, the
//     new holder needs a round trip), or, for a hold younger than
//     Workload.FirstCheck at the change (not tracked yet), TellBound after
//     its first check, or for a permit or leadership hit by a DEL,
//     TellBound after its next renewal (their hashes are not tracked); or
//     if it stopped (Unlock) before then and Unlock said ErrLockLost (or
//     never learned: its ctx ended). An overlap it is not excused for
//     counts in WorkloadReport.ToldLate, with one message per old holder;
//   - (d) reads a lock the change surely hit (returned before the change
//     began) as free from the end of the change (waiters track the key
//     and wake when it is deleted), a permit or a leadership as free a
//     lease of its holder later (their hashes are not tracked: a waiter
//     sleeps at most until the holder's lease would have run out);
//   - (e) skips waits that meet a change of their name (plus FaultGrace):
//     a deleted hash or a flushed queue starts the name afresh.
//
// A change hits a hold of a name it covers whose key it may have found:
// the hold was returned before the change ended or within TellBound
// after it (a grant made before, or a local hand-off by a holder not yet
// told), and had not ended (nor its Unlock returned) before the change
// began. It surely hit it if the hold was returned before the change
// began.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton"
)

// change is an outside change of keys.
type change struct {
	window
	what  string
	names map[int]bool // the names whose keys it changed; nil: every name
}

// Names returns the run's names: the locks, then the semaphores, then the
// elections.
func (c *WorkloadControl) Names() []string { return slices.Clone(c.r.names) }

// Key returns the main key of a name of the run: its lock key, or its
// semaphore's or election's hash; "" for a name not of the run.
func (c *WorkloadControl) Key(name string) string {
	if i := slices.Index(c.r.names, name); i >= 0 {
		return c.r.keyOf(i)
	}
	return ""
}

// Outside marks the start of a change of keys from outside (call it just
// before sending it): what names it ("DEL", "FLUSHALL"), names are those
// whose keys it changes, none for every key. Call the returned function
// once the change is done (its reply came). See workload_outside.go for
// what the oracles excuse.
func (c *WorkloadControl) Outside(what string, names ...string) (end func()) {
	r := c.r
	ch := change{window: window{from: time.Now()}, what: what}
	if len(names) > 0 {
		ch.names = map[int]bool{}
		for _, n := range names {
			if i := slices.Index(r.names, n); i >= 0 {
				ch.names[i] = true
			}
		}
	}
	r.mu.Lock()
	i := len(r.changes)
	r.changes = append(r.changes, ch)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.changes[i].to = time.Now()
		r.mu.Unlock()
	}
}

// changeEnd is when c ended; never while it runs.
func (c change) end() time.Time {
	if c.to.IsZero() {
		return never
	}
	return c.to
}

// hitByLocked returns the first change that hit h (surely, if sure) and
// began no later than before, or nil. r.mu is held.
func (r *wrun) hitByLocked(h *whold, before time.Time, sure bool) *change {
	for i := range r.changes {
		c := &r.changes[i]
		switch {
		case c.from.After(before):
			return nil
		case c.names != nil && !c.names[h.name]:
		case sure && !h.acquired.Before(c.from):
		case h.acquired.After(c.end().Add(r.cfg.TellBound)):
		case releasedBy(h).Before(c.from):
		default:
			return c
		}
	}
	return nil
}

// releasedBy is when h surely no longer held its key: its end (see
// whold.end), or the return of its Unlock, whose release may run after a
// change that came meanwhile.
func releasedBy(h *whold) time.Time {
	e := h.end()
	switch {
	case !h.unlocked:
	case h.unlockRet.IsZero():
		e = never
	case h.unlockRet.After(e):
		e = h.unlockRet
	}
	return e
}

// changeAtLocked says whether [from, to] meets a change of name (plus
// FaultGrace). r.mu is held.
func (r *wrun) changeAtLocked(name int, from, to time.Time) bool {
	for _, c := range r.changes {
		if (c.names == nil || c.names[name]) && !from.After(c.end().Add(r.cfg.FaultGrace)) && !to.Before(c.from) {
			return true
		}
	}
	return false
}

// toldInTime is (b)'s reading of an overlap of earlier hold a with later
// hold b: whether a change hit a before b returned and a heard of it in
// time (see toldBy), and if it did not, what to say of a (nil: no change
// hit it). It records the lag in rep. r.mu is held.
func (r *wrun) toldInTime(rep *WorkloadReport, a, b *whold) (excused bool, late *lateHold) {
	c := r.hitByLocked(a, b.acquired, false)
	if c == nil {
		return false, nil
	}
	lost, by := a.lost(), r.toldBy(a, c, b)
	if !lost.IsZero() {
		rep.MaxTellLag = max(rep.MaxTellLag, lost.Sub(b.acquired))
	}
	// Told in time, or stopped (Unlock) before it was due to be told and
	// its Unlock said it was lost (or never learned).
	if !lost.IsZero() && !lost.After(by) || lost.IsZero() && a.unlocked && !a.unlockAt.After(by) && (endedLost(a) || unlockUnknown(a)) {
		rep.ToldInTime++
		return true, nil
	}
	late = &lateHold{a: a, kind: "lock"}
	switch {
	case r.elect[a.name]:
		late.kind = "leader"
	case r.limits[a.name] > 0:
		late.kind = "permit"
	}
	age := ""
	switch d := c.from.Sub(a.acquired); {
	case d < 0:
		late.kind += " returned after the change began" // a grant made before it, or a hold it missed
	case d < r.cfg.FirstCheck:
		late.kind += " (young)"
		age = fmt.Sprintf(" (%s old: due by its first check, %v after its acquisition)", ms(d), r.cfg.FirstCheck)
	}
	told := "never told (Done)"
	if !lost.IsZero() {
		told = fmt.Sprintf("told of its loss %s after that", ms(lost.Sub(b.acquired)))
	}
	late.msg = fmt.Sprintf("%s %s..%s hit %s%s; %s returned %s after the change began; the old holder was %s, due by %s (TellBound %v) (%s)",
		c.what, r.at(c.from), r.at(c.to), r.holdText(a), age, r.holdText(b), ms(b.acquired.Sub(c.from)), told, r.at(by), r.cfg.TellBound, r.endText(a))
	return false, late
}

// lateHold is an old holder an outside change hit that heard of it late
// for an overlap, and what to say of it.
type lateHold struct {
	a         *whold
	kind, msg string
}

// noteLateLocked records the late holders of an overlap (b) counted: in
// rep's counts, and their messages, each old holder's once (the others
// are left out of the result). r.mu is held.
func (r *wrun) noteLateLocked(rep *WorkloadReport, late []*lateHold) []string {
	var msgs []string
	for _, l := range late {
		rep.ToldLate++
		if r.toldLate[l.a] {
			continue
		}
		r.toldLate[l.a] = true
		if rep.LateHolders == nil {
			rep.LateHolders = map[string]int{}
		}
		rep.LateHolders[l.kind]++
		msgs = append(msgs, l.msg)
	}
	return msgs
}

// toldBy is when a holder a that change c hit must have heard of it, b
// having acquired after: TellBound after b returned, or after a's first
// check (Workload.FirstCheck after its acquisition) if later: a hold
// younger than that is not tracked yet, and hears of a change at its first
// check or at its end (then Unlock or Err says ErrLockLost). A permit or
// a leadership hears of a DEL of its hash at its session's next renewal,
// a third of its lease after the change at the latest (their hashes are
// not tracked: README, "After Redis loses data"), of a flush at once.
func (r *wrun) toldBy(a *whold, c *change, b *whold) time.Time {
	t := b.acquired
	if first := a.acquired.Add(r.cfg.FirstCheck); c.from.Before(first) && first.After(t) {
		t = first
	}
	if renewal := c.to.Add(a.sess.lease / 3); (r.elect[a.name] || r.limits[a.name] > 0) && c.what == "DEL" && renewal.After(t) {
		t = renewal
	}
	return t.Add(r.cfg.TellBound)
}

// unlockUnknown says whether h's Unlock ended without learning what
// Redis held: its caller's ctx ended, the release was not confirmed, a
// Close ended the hold, or Unlock passed it on locally.
// A young hold "hears of a change at its end" only if its Unlock learns.
func unlockUnknown(h *whold) bool {
	return h.unlockRet.IsZero() || errors.Is(h.unlockErr, context.DeadlineExceeded) || errors.Is(h.unlockErr, context.Canceled) ||
		errors.Is(h.unlockErr, baton.ErrUnconfirmed) || errors.Is(h.unlockErr, baton.ErrClosed) || passedOn(h)
}

// passedOn says whether h's Unlock handed the hold to another goroutine of
// its session without Redis (a local hand-off: the next token of the same
// fence): it learned nothing of the key, and the hold's next holder hears
// of the change in its place.
func passedOn(h *whold) bool {
	if h.unlockErr != nil {
		return false
	}
	for _, o := range h.sess.holds {
		if o.token == h.token+1 && o.name == h.name {
			return true
		}
	}
	return false
}

// endedLost says whether the holder of h heard of its loss at its end:
// Err or Unlock (Do) said ErrLockLost.
func endedLost(h *whold) bool {
	return errors.Is(h.unlockErr, baton.ErrLockLost) || errors.Is(h.errAtEnd, baton.ErrLockLost)
}

// freeAfterChangeLocked is until when (d) reads hold h as keeping its name
// busy, given the changes: busyUntil, cut at the end of a change that hit
// h (a lock), or a lease of h's session after it (a permit or a
// leadership). r.mu is held.
func (r *wrun) freeAfterChangeLocked(h *whold) time.Time {
	t := h.busyUntil()
	c := r.hitByLocked(h, never, true)
	if c == nil || c.to.IsZero() {
		return t
	}
	cut := c.to
	if r.limits[h.name] > 0 {
		cut = cut.Add(h.sess.lease)
	}
	if cut.Before(t) {
		return cut
	}
	return t
}

// changesText summarises the changes for the report.
func (r *wrun) changesText() string {
	counts := map[string]int{}
	for _, c := range r.changes {
		counts[c.what]++
	}
	var parts []string
	for _, k := range mapKeys(toStrMap(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

func toStrMap(m map[string]int) map[string]string {
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = ""
	}
	return out
}
