package checker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// Planted findings for the oracles added for issue 16: each test builds
// the records of a run by hand and checks that the oracle fails on the
// fault and passes without it.

func TestWorkloadSemFIFOOracle(t *testing.T) {
	build := func(overtakes int, ownAhead bool) analysisRun {
		a := semAnalysis(2)
		s, u, x := a.session("s", time.Second), a.session("u", time.Second), a.session("x", time.Second)
		a.permit(x, 100, 0, 1, 500)         // one permit taken throughout
		w := a.wait(s, 10, 25+40*overtakes) // waits until just after the last of u's
		w.op = opAcquire
		if ownAhead {
			x := a.wait(s, 5, 30) // a goroutine of s ahead of it
			x.op = opAcquire
		}
		for i := range overtakes { // u's calls begin after w's and return during it
			at := 20 + 40*i
			a.permit(u, uint64(i+1), at, at+1, at+30)
		}
		return a
	}
	rep := build(6, false).check(t, oFIFO, 1) // bound 2 x 1 + 1 + 2 = 5
	if rep.MaxOvertakes != 6 || !strings.Contains(rep.Failures[oFIFO][0], "u took 6 permits") {
		t.Fatalf("max overtakes %d: %v", rep.MaxOvertakes, rep.Failures[oFIFO])
	}
	build(5, false).check(t, oFIFO, 0)
	build(6, true).check(t, oFIFO, 0) // bound 2 x 2 + 1 + 2 = 7
}

func TestWorkloadOutsideChange(t *testing.T) {
	// s holds from 1 (a hold 100 ms old at the DEL at 101); u acquires at
	// 103; s hears of it at lost.
	build := func(lost int, fc time.Duration) analysisRun {
		a := newAnalysis()
		a.cfg.TellBound, a.cfg.FirstCheck = 10*time.Millisecond, fc
		a.toldLate = map[*whold]bool{}
		a.changes = []change{{window: window{a.at(101), a.at(102)}, what: "DEL", names: map[int]bool{0: true}}}
		h := a.hold(a.session("s", time.Second), 1, 0, 1, 200)
		if lost > 0 {
			h.doneAt, h.cause = a.at(lost), baton.ErrLockLost
		}
		a.hold(a.session("u", time.Second), 2, 102, 103, 150)
		return a
	}
	t.Run("told in time", func(t *testing.T) {
		if rep := build(110, 50*time.Millisecond).check(t, oOverlap, 0); rep.ToldInTime != 1 {
			t.Fatalf("told in time %d", rep.ToldInTime)
		}
	})
	t.Run("told late", func(t *testing.T) {
		rep := build(150, 50*time.Millisecond).check(t, oOverlap, 1)
		if rep.ToldLate != 1 || !strings.Contains(rep.Failures[oOverlap][0], "told of its loss 47.0ms after that") {
			t.Fatalf("told late %d: %v", rep.ToldLate, rep.Failures[oOverlap])
		}
	})
	t.Run("never told", func(t *testing.T) {
		build(0, 50*time.Millisecond).check(t, oOverlap, 1)
	})
	t.Run("young hold", func(t *testing.T) {
		// A hold 5 ms old at the change hears of it at its first check.
		a := build(0, 50*time.Millisecond)
		s := a.holds[0]
		s.acquired, s.call.end = a.at(96), a.at(96)
		s.doneAt, s.cause = a.at(146), baton.ErrLockLost // 96 + 50
		a.check(t, oOverlap, 0)
		a = build(0, 0) // FirstCheck 0: told at once, or it is late
		s = a.holds[0]
		s.acquired, s.call.end = a.at(96), a.at(96)
		s.doneAt, s.cause = a.at(146), baton.ErrLockLost
		a.check(t, oOverlap, 1)
	})
	t.Run("loss excused", func(t *testing.T) {
		a := build(150, 50*time.Millisecond)
		a.holds = a.holds[:1]
		a.check(t, oLoss, 0)
	})
}

// TestWorkloadIdleAfterChange: a lock deleted under its holder is free
// from the DEL on (its waiters track the key); a permit a lease later.
func TestWorkloadIdleAfterChange(t *testing.T) {
	a := newAnalysis()
	a.toldLate = map[*whold]bool{}
	a.cfg.TellBound = 10 * time.Millisecond
	s, u := a.session("s", 10*time.Second), a.session("u", time.Second)
	h := a.hold(s, 1, 0, 1, 5000) // holds on, not told, Unlock fails
	h.unlockErr = errors.New("its release failed")
	a.wait(u, 50, 400)
	a.check(t, oIdle, 0) // busy by the record: nobody deleted anything
	a.changes = []change{{window: window{a.at(100), a.at(101)}, what: "DEL", names: map[int]bool{0: true}}}
	a.fails, a.nfails = map[string][]string{}, map[string]int{}
	rep := a.check(t, oIdle, 1) // free from 101 to 400
	if rep.IdleMax != 299*time.Millisecond {
		t.Fatalf("idle max %v", rep.IdleMax)
	}
}

// TestWorkloadChildren: a killed child's hold ends at its kill and keeps
// the name busy a lease more; one killed while waiting, two leases.
func TestWorkloadChildren(t *testing.T) {
	a := newAnalysis()
	k := a.session("k1", 100*time.Millisecond)
	k.killed = a.at(50)
	h := a.hold(k, 1, 0, 1, 0)
	h.unlocked, h.doneAt, h.cause, h.unlockAt, h.unlockRet = false, time.Time{}, nil, time.Time{}, time.Time{}
	u := a.session("u", time.Second)
	a.hold(u, 2, 40, 60, 70) // after the kill: no overlap (b)
	a.check(t, oOverlap, 0)
	w := a.wait(u, 80, 200) // busy until 150, free after: 50 ms
	a.fails, a.nfails = map[string][]string{}, map[string]int{}
	a.check(t, oIdle, 0)
	w.end = a.at(300) // free from 150 to 300
	a.fails, a.nfails = map[string][]string{}, map[string]int{}
	a.check(t, oIdle, 1)

	// A child killed while waiting at 500: busy until 700.
	b := newAnalysis()
	k2 := b.session("k2", 100*time.Millisecond)
	k2.killed = b.at(500)
	c := b.wait(k2, 400, 500)
	c.kind = killedKind
	b.kids = []*wchild{{ws: k2, name: 0, call: c}}
	b.wait(b.session("u", time.Second), 510, 690)
	b.check(t, oIdle, 0)
	b.wait(b.session("v", time.Second), 510, 900) // free from 700: 200 ms
	b.fails, b.nfails = map[string][]string{}, map[string]int{}
	b.check(t, oIdle, 1)
}

func TestWorkloadObservedLeaders(t *testing.T) {
	build := func(campaignOK bool) analysisRun {
		a := semAnalysis(1)
		a.elect = []bool{true}
		s := a.session("s", time.Second)
		c := &wcall{op: opCampaign, sess: s, name: 0, start: a.at(0), end: a.at(10), value: "v1", kind: "context", errText: "ctx"}
		if campaignOK {
			c.kind, c.errText = "", ""
			h := &whold{call: c, sess: s, token: 7, acquired: a.at(10), unlocked: true, unlockAt: a.at(20), unlockRet: a.at(21), doneAt: a.at(20), cause: baton.ErrUnlocked}
			c.hold = h
			a.holds = append(a.holds, h)
		}
		a.calls = append(a.calls, c)
		cl := &wclient{label: "c0"}
		a.obs = []*wobserve{{cl: cl, name: 0, start: a.at(0), end: a.at(30), seen: []seenLeader{
			{a.at(9), baton.Leader{Value: "v1", Token: 7}}, {a.at(25), baton.Leader{}},
		}}}
		return a
	}
	rep := build(false).check(t, oObserve, 1)
	if !strings.Contains(rep.Failures[oObserve][0], "phantom") {
		t.Fatalf("%v", rep.Failures[oObserve])
	}
	build(true).check(t, oObserve, 0)
}
