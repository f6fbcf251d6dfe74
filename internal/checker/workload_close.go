package checker

// Closes in the workload: Session.Close and Client.Close mid-run and at
// the end, timed, and what must hold once they returned (oracles (f), (g)).

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batonlock/baton"
)

type closeRec struct {
	what  string
	label string
	dur   time.Duration
}

// closeRandomSession closes a random extra session and makes another in
// its place.
func (r *wrun) closeRandomSession(rng *rand.Rand) {
	r.mu.Lock()
	cl := r.slots[rng.IntN(len(r.slots))]
	if len(cl.extra) == 0 || !cl.closeStart.IsZero() {
		r.mu.Unlock()
		return
	}
	i := rng.IntN(len(cl.extra))
	ws := cl.extra[i]
	cl.extra = slices.Delete(cl.extra, i, i+1)
	if !ws.closeStart.IsZero() {
		r.mu.Unlock()
		return
	}
	ws.closeStart, ws.closedBy = time.Now(), "Session.Close"
	r.mu.Unlock()
	dur, err, ok := r.timedClose(ws.s.Close)
	r.mu.Lock()
	ws.closeEnd, ws.closeErr = ws.closeStart.Add(dur), err
	r.closes = append(r.closes, closeRec{"Session.Close", ws.label, dur})
	r.mu.Unlock()
	if !ok {
		r.failf(oCloseDur, "Session.Close of %s (begun %s) did not return within %v", ws.label, r.at(ws.closeStart), dur)
		return
	}
	r.judgeClose("Session.Close", ws.label, ws.closeStart, dur, err)
	r.checkClosed([]*wsession{ws})
	lease := r.cfg.SessionLeases[rng.IntN(len(r.cfg.SessionLeases))]
	s, err := cl.c.NewSession(baton.SessionOptions{LeaseTTL: lease})
	if err != nil {
		if !errors.Is(err, baton.ErrClosed) {
			r.failf(oErr, "NewSession on %s: %v", cl.label, err)
		}
		return
	}
	r.mu.Lock()
	if cl.closeStart.IsZero() {
		cl.extra = append(cl.extra, r.addSessionLocked(cl, s, lease))
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	s.Close()
}

// restartRandomClient puts a new Client in a random slot and closes the
// old one while its workers may still hold, wait and release.
func (r *wrun) restartRandomClient(rng *rand.Rand) {
	slot := rng.IntN(len(r.cfg.Leases))
	r.mu.Lock()
	old := r.slots[slot]
	r.mu.Unlock()
	cl, err := r.newClient(slot, old.gen+1, rng)
	if err != nil {
		r.failf(oErr, "re-making client %d: %v", slot, err)
		return
	}
	r.mu.Lock()
	r.slots[slot] = cl
	r.mu.Unlock()
	r.closeClient(old)
}

// closeClient closes cl and checks what must hold once Close returned.
func (r *wrun) closeClient(cl *wclient) {
	r.mu.Lock()
	start := time.Now()
	cl.closeStart = start
	sessions := slices.Clone(cl.all)
	for _, ws := range sessions {
		if ws.closeStart.IsZero() {
			ws.closeStart, ws.closedBy = start, "Client.Close"
		}
	}
	r.mu.Unlock()
	dur, err, ok := r.timedClose(cl.c.Close)
	r.mu.Lock()
	cl.closeEnd = start.Add(dur)
	for _, ws := range sessions {
		if ws.closedBy == "Client.Close" {
			ws.closeEnd, ws.closeErr = cl.closeEnd, err
		}
	}
	r.closes = append(r.closes, closeRec{"Client.Close", cl.label, dur})
	r.mu.Unlock()
	if !ok {
		r.failf(oCloseDur, "Client.Close of %s (begun %s) did not return within %v", cl.label, r.at(start), dur)
		return
	}
	r.judgeClose("Client.Close", cl.label, start, dur, err)
	r.clientClosed(cl, cl.closeEnd)
	// Sessions closed before by Session.Close were checked then.
	r.checkClosed(slices.DeleteFunc(sessions, func(ws *wsession) bool { return ws.closedBy != "Client.Close" }))
}

// timedClose runs close, waiting at most three Close bounds; ok is false
// if it did not return by then (its goroutine is abandoned).
func (r *wrun) timedClose(close func() error) (time.Duration, error, bool) {
	start := time.Now()
	ch := make(chan error, 1)
	go func() { ch <- close() }()
	t := time.NewTimer(3 * r.cfg.CloseBound)
	defer t.Stop()
	select {
	case err := <-ch:
		return time.Since(start), err, true
	case <-t.C:
		r.mu.Lock()
		r.hung = true
		r.mu.Unlock()
		return time.Since(start), nil, false
	}
}

func (r *wrun) judgeClose(what, label string, start time.Time, dur time.Duration, err error) {
	if dur > r.cfg.CloseBound {
		r.failf(oCloseDur, "%s of %s took %s (begun %s), bound %v", what, label, ms(dur), r.at(start), r.cfg.CloseBound)
	}
	if err != nil && !r.inFault(start, start.Add(dur)) {
		r.failf(oErr, "%s of %s (begun %s): %v", what, label, r.at(start), err)
	}
}

// checkClosed: after the Close of these sessions returned, every lock they
// ever returned has Done closed; once their in-flight operations ended,
// Redis names none of them as owner or live queue entry.
func (r *wrun) checkClosed(sessions []*wsession) {
	closed := map[string]*wsession{}
	for _, ws := range sessions {
		r.mu.Lock()
		holds := slices.Clone(ws.holds)
		if ws.member != "" {
			closed[ws.member] = ws
		}
		r.mu.Unlock()
		r.checkDoneClosed(ws, holds)
	}
	if len(closed) == 0 {
		return
	}
	info := r.unexcusedCloses(closed)
	if !r.drainOps(sessions) {
		return // stuck calls are reported at the end
	}
	after := time.Now()
	r.semClosed(closed, after)
	r.checkLeftovers(closed, info, after)
}

// checkDoneClosed is checkClosed's first check for one closed session ws:
// every lock in holds (those ws ever returned) has Done closed.
func (r *wrun) checkDoneClosed(ws *wsession, holds []*whold) {
	for _, h := range holds {
		h.mu.Lock()
		l := h.lock
		h.mu.Unlock()
		if l == nil {
			continue
		}
		select {
		case <-l.Done():
		default:
			r.mu.Lock()
			by, cs, ce := ws.closedBy, ws.closeStart, ws.closeEnd
			r.mu.Unlock()
			uat, _, called := h.unlockTimes()
			unlock := "not called"
			if called {
				unlock = "called " + r.at(uat)
			}
			r.failf(oClose, "%s: lock on %s token %d (acquired %s by %s) survived its %s (begun %s, returned %s): Done open, Err %v, Unlock %s",
				ws.label, r.names[h.name], h.token, r.at(h.acquired), h.call.op, by, r.at(cs), r.at(ce), l.Err(), unlock)
		}
	}
}

// closeInfo is how a closed session was closed, copied under r.mu for the
// messages of checkLeftovers.
type closeInfo struct {
	by     string
	cs, ce time.Time
}

// unexcusedCloses drops from closed (by member) the sessions whose
// leftovers in Redis a fault excuses, and returns how the others were
// closed.
func (r *wrun) unexcusedCloses(closed map[string]*wsession) map[*wsession]closeInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	for m, ws := range closed {
		// A fault in the lease before Close (or during it) may have lost a
		// call whose outcome nobody can know, and its leftovers lapse with
		// the lease: baton cleans up as best it can (Close tries again).
		if r.cleanupExcusedLocked(ws) {
			delete(closed, m)
		}
	}
	info := map[*wsession]closeInfo{}
	for _, ws := range closed {
		info[ws] = closeInfo{ws.closedBy, ws.closeStart, ws.closeEnd}
	}
	return info
}

// drainOps waits until the operations in flight on sessions have ended, so
// that what Redis holds for them afterwards stays; false if they did not
// within a Close bound and a Lock timeout.
func (r *wrun) drainOps(sessions []*wsession) bool {
	// Let Unlock calls that began before Close finish: what Redis holds
	// for the sessions after that stays.
	drained := make(chan struct{})
	go func() {
		for _, ws := range sessions {
			ws.ops.Wait()
		}
		close(drained)
	}()
	t := time.NewTimer(r.cfg.CloseBound + r.cfg.LockTimeout)
	defer t.Stop()
	select {
	case <-drained:
		return true
	case <-t.C:
		return false
	}
}

// checkLeftovers is checkClosed's Redis check, made at after: no lock key
// names a session of closed as its owner, no live queue entry names one,
// and no cache mark does; info says how each was closed.
func (r *wrun) checkLeftovers(closed map[string]*wsession, info map[*wsession]closeInfo, after time.Time) {
	st, err := r.scan(r.hard)
	if err != nil {
		r.mu.Lock()
		r.scanErrs = append(r.scanErrs, err.Error())
		r.mu.Unlock()
		return
	}
	for _, ks := range st {
		if ws := closed[ks.owner]; ws != nil {
			ci := info[ws]
			r.failf(oClose, "%s (closed by %s %s..%s): at %s, after its calls ended, Redis still has it as owner of %s (value %q, PTTL %dms)",
				ws.label, ci.by, r.at(ci.cs), r.at(ci.ce), r.at(after), ks.name, ks.value, ks.pttl)
		}
		for _, m := range ks.live {
			if ws := closed[m]; ws != nil {
				ci := info[ws]
				r.failf(oClose, "%s (closed by %s %s..%s): at %s, after its calls ended, Redis still queues it for %s (queue %v, entry %q)",
					ws.label, ci.by, r.at(ci.cs), r.at(ci.ce), r.at(after), ks.name, r.labels(ks.queue), ks.entries[m])
			}
		}
		if m, ok := splitHolder(ks.cache); ok && closed[m] != nil {
			ws := closed[m]
			ci := info[ws]
			r.failf(oClose, "%s (closed by %s %s..%s): at %s, after its calls ended, Redis still has its cache mark %s:c (value %q, PTTL %dms)",
				ws.label, ci.by, r.at(ci.cs), r.at(ci.ce), r.at(after), r.lockKey(ks.name), ks.cache, ks.cttl)
		}
	}
}
