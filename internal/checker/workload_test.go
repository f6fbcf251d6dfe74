package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// TestWorkloadRuns: the workload runs against a real server, exercises
// every operation, closes and re-makes sessions and clients, and reports.
// It does not judge baton (see TestWorkload in the root package).
func TestWorkloadRuns(t *testing.T) {
	srv := redistest.Start(t)
	rep, err := RunWorkload(context.Background(), Workload{
		Names:              3,
		Duration:           1500 * time.Millisecond,
		SessionCloseEvery:  100 * time.Millisecond,
		ClientRestartEvery: 500 * time.Millisecond,
		Options:            func(int) baton.Options { return baton.Options{Redis: srv.Option()} },
		Redis:              srv.Option,
		LeakOptions:        redistest.KnownLeaks(),
	}, func(ctx context.Context) {
		end := WorkloadControlFrom(ctx).Fault()
		end()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if err := rep.Check(); err != nil {
		t.Logf("findings (not judged here):\n%v", err)
	}
	if rep.Acquisitions == 0 || rep.Calls["Lock"] == 0 || rep.Calls["TryLock"] == 0 || rep.Calls["Do"] == 0 {
		t.Fatalf("calls %v, %d acquisitions", rep.Calls, rep.Acquisitions)
	}
	if rep.SessionCloses == 0 || rep.ClientCloses <= 3 || rep.Sessions <= 9 || rep.Faults != 1 {
		t.Fatalf("%d Session.Close, %d Client.Close, %d sessions, %d faults", rep.SessionCloses, rep.ClientCloses, rep.Sessions, rep.Faults)
	}
	if rep.Counts[oLeak] != 0 {
		t.Fatalf("goroutines left: %s", rep.Leaked)
	}
}

// analysisRun is a run with hand-made records.
type analysisRun struct {
	*wrun
	t0 time.Time
}

func newAnalysis() analysisRun {
	t0 := time.Now()
	r := &wrun{
		cfg:    Workload{WaitBound: 100 * time.Millisecond, FIFOSlack: 2, FaultGrace: time.Second},
		names:  []string{"n"},
		limits: []int{0},
		elect:  []bool{false},
		t0:     t0,
		fails:  map[string][]string{},
		nfails: map[string]int{},
	}
	return analysisRun{r, t0}
}

func (a analysisRun) at(ms int) time.Time { return a.t0.Add(time.Duration(ms) * time.Millisecond) }

func (a analysisRun) session(label string, lease time.Duration) *wsession {
	return &wsession{label: label, lease: lease}
}

// hold records an acquisition by a Lock call [call, acq] held until unlock
// (Unlock returned 1 ms later).
func (a analysisRun) hold(s *wsession, token uint64, call, acq, unlock int) *whold {
	c := &wcall{op: opLock, sess: s, start: a.at(call), end: a.at(acq), timeout: time.Second}
	h := &whold{call: c, sess: s, token: token, acquired: a.at(acq), unlocked: true,
		unlockAt: a.at(unlock), unlockRet: a.at(unlock + 1), doneAt: a.at(unlock), cause: baton.ErrUnlocked}
	c.hold = h
	a.calls = append(a.calls, c)
	a.holds = append(a.holds, h)
	return h
}

// wait records a Lock call [from, to] that did not acquire.
func (a analysisRun) wait(s *wsession, from, to int) *wcall {
	c := &wcall{op: opLock, sess: s, start: a.at(from), end: a.at(to), kind: "context", timeout: time.Second}
	a.calls = append(a.calls, c)
	return c
}

func (a analysisRun) check(t *testing.T, oracle string, want int) WorkloadReport {
	t.Helper()
	rep := a.analyse()
	if got := rep.Counts[oracle]; got != want {
		t.Fatalf("%s: %d failures, want %d: %v", oracle, got, want, rep.Failures)
	}
	for o, n := range rep.Counts {
		if o != oracle && n > 0 {
			t.Fatalf("unexpected %s failures: %v", o, rep.Failures[o])
		}
	}
	return rep
}

func TestWorkloadLossOracle(t *testing.T) {
	t.Run("signalled", func(t *testing.T) {
		a := newAnalysis()
		s := a.session("s", time.Second)
		h := a.hold(s, 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(3), fmt.Errorf("x: %w", baton.ErrLockLost)
		a.hold(a.session("u", time.Second), 2, 2, 4, 10)
		rep := a.check(t, oLoss, 1)
		if m := rep.Failures[oLoss][0]; !strings.Contains(m, "EARLY") || !strings.Contains(m, "next acquisition 1.0ms after") {
			t.Fatalf("message lacks the early mark or the next acquisition: %s", m)
		}
	})
	t.Run("during a fault", func(t *testing.T) {
		a := newAnalysis()
		a.faults = []window{{a.at(0), a.at(1)}}
		h := a.hold(a.session("s", time.Second), 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(900), baton.ErrLockLost
		a.check(t, oLoss, 0)
	})
	t.Run("long after a fault", func(t *testing.T) {
		a := newAnalysis()
		a.faults = []window{{a.at(0), a.at(1)}}
		h := a.hold(a.session("s", 100*time.Millisecond), 1, 0, 1, 1500)
		h.doneAt, h.cause = a.at(1400), baton.ErrLockLost
		a.check(t, oLoss, 1)
	})
	t.Run("unlock says lost", func(t *testing.T) {
		a := newAnalysis()
		h := a.hold(a.session("s", time.Second), 1, 0, 1, 50)
		h.unlockErr = baton.ErrLockLost
		a.check(t, oLoss, 1)
	})
	t.Run("closed without Close", func(t *testing.T) {
		a := newAnalysis()
		s := a.session("s", time.Second)
		h := a.hold(s, 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(20), baton.ErrClosed
		a.check(t, oLoss, 1)
		s.closeStart, s.closeEnd = a.at(19), a.at(21)
		a.fails, a.nfails = map[string][]string{}, map[string]int{}
		a.check(t, oLoss, 0)
	})
}

func TestWorkloadOverlapOracle(t *testing.T) {
	t.Run("overlap", func(t *testing.T) {
		a := newAnalysis()
		a.hold(a.session("s", time.Second), 1, 0, 1, 50)
		a.hold(a.session("u", time.Second), 2, 0, 20, 60)
		rep := a.check(t, oOverlap, 1)
		if rep.Overlaps != 1 {
			t.Fatalf("overlaps %d", rep.Overlaps)
		}
	})
	t.Run("told first", func(t *testing.T) {
		a := newAnalysis()
		a.faults = []window{{a.at(0), a.at(1)}}
		h := a.hold(a.session("s", time.Second), 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(15), baton.ErrLockLost
		a.hold(a.session("u", time.Second), 2, 0, 20, 60)
		a.check(t, oOverlap, 0)
	})
	t.Run("ended by Close", func(t *testing.T) {
		a := newAnalysis()
		s := a.session("s", time.Second)
		s.closeStart, s.closeEnd = a.at(10), a.at(12)
		h := a.hold(s, 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(11), baton.ErrClosed
		a.hold(a.session("u", time.Second), 2, 0, 20, 60)
		a.check(t, oOverlap, 0)
	})
	t.Run("survived Close", func(t *testing.T) {
		a := newAnalysis()
		s := a.session("s", time.Second)
		s.closeStart, s.closeEnd = a.at(10), a.at(12)
		h := a.hold(s, 1, 0, 1, 50)
		h.unlocked, h.doneAt, h.cause, h.open = false, time.Time{}, nil, true
		a.hold(a.session("u", time.Second), 2, 0, 2000, 2010)
		a.check(t, oOverlap, 1)
	})
}

func TestWorkloadTokenOracle(t *testing.T) {
	a := newAnalysis()
	s := a.session("s", time.Second)
	a.hold(s, 5, 0, 1, 2)
	a.hold(s, 6, 2, 3, 4)
	a.hold(s, 6, 4, 5, 6)
	a.check(t, oToken, 1)
}

func TestWorkloadIdleOracle(t *testing.T) {
	t.Run("free name", func(t *testing.T) {
		a := newAnalysis()
		s, u := a.session("s", time.Second), a.session("u", time.Second)
		a.hold(s, 1, 0, 1, 50)
		w := a.wait(u, 10, 400) // free from 51 to 400
		rep := a.check(t, oIdle, 1)
		if rep.IdleMax != 349*time.Millisecond {
			t.Fatalf("idle max %v", rep.IdleMax)
		}
		if m := rep.Failures[oIdle][0]; !strings.Contains(m, "after the release of s token 1") {
			t.Fatalf("message does not name the release: %s", m)
		}
		_ = w
	})
	t.Run("taken by another", func(t *testing.T) {
		a := newAnalysis()
		s, u, v, x := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second), a.session("x", time.Second)
		a.hold(s, 1, 0, 1, 50)
		a.wait(u, 10, 400)          // free from 51 to 300
		a.hold(v, 2, 299, 300, 350) // then v takes it (and x after v)
		a.hold(x, 3, 320, 351, 600)
		rep := a.check(t, oIdle, 1)
		if m := rep.Failures[oIdle][0]; !strings.Contains(m, "then v token 2") || !strings.Contains(m, "waited 249.0ms") {
			t.Fatalf("message does not name who took the name: %s", m)
		}
	})
	t.Run("someone ahead", func(t *testing.T) {
		a := newAnalysis()
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.hold(s, 1, 0, 1, 50)
		a.wait(v, 5, 300) // ahead of u's waiter until 300: its own idle wait is the finding
		a.wait(u, 10, 350)
		rep := a.check(t, oIdle, 1)
		if !strings.Contains(rep.Failures[oIdle][0], "by v") {
			t.Fatalf("blamed the wrong waiter: %v", rep.Failures[oIdle])
		}
	})
	t.Run("behind within bound", func(t *testing.T) {
		a := newAnalysis()
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.hold(s, 1, 0, 1, 50)
		a.wait(v, 5, 120)  // 69 ms free: within the bound
		a.wait(u, 10, 200) // free 120..200 with nobody ahead: 80 ms
		a.check(t, oIdle, 0)
	})
	t.Run("failed release", func(t *testing.T) {
		a := newAnalysis()
		s, u := a.session("s", time.Second), a.session("u", time.Second)
		h := a.hold(s, 1, 0, 1, 50)
		h.unlockErr = context.DeadlineExceeded // the key may stay a lease
		a.wait(u, 10, 900)
		a.check(t, oIdle, 0)
	})
	t.Run("own Close", func(t *testing.T) {
		a := newAnalysis()
		s, u := a.session("s", time.Second), a.session("u", time.Second)
		a.hold(s, 1, 0, 1, 50)
		u.closeStart, u.closeEnd = a.at(100), a.at(101)
		a.wait(u, 10, 400)
		a.check(t, oIdle, 0)
	})
}

func TestWorkloadFIFOOracle(t *testing.T) {
	build := func(handoffs bool) analysisRun {
		a := newAnalysis()
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.wait(s, 0, 200) // waits alone: limit 0 + 1 + 2 = 3
		tok := uint64(0)
		for i := range 5 {
			at := 10 + 40*i
			tok++
			a.hold(u, tok, at-1, at, at+5)
			if handoffs {
				tok++
				a.hold(u, tok, at+4, at+6, at+10)
			} else {
				tok++
				a.hold(v, tok, at+9, at+10, at+20)
			}
		}
		return a
	}
	rep := build(false).check(t, oFIFO, 1)
	if !strings.Contains(rep.Failures[oFIFO][0], "began 5 turns") || rep.MaxTurns != 5 {
		t.Fatalf("max turns %d: %v", rep.MaxTurns, rep.Failures[oFIFO])
	}
	// u alone, with local hand-offs inside each turn: one turn in all.
	if rep := build(true).check(t, oFIFO, 0); rep.MaxTurns != 1 {
		t.Fatalf("max turns %d, want 1", rep.MaxTurns)
	}
}

func TestGap(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ss := merge([]span{{from: at(10), to: at(20)}, {from: at(15), to: at(30)}, {from: at(50), to: at(60)}})
	if len(ss) != 2 || !ss[0].to.Equal(at(30)) {
		t.Fatalf("merge: %v", ss)
	}
	for _, tc := range []struct{ from, to, want int }{
		{0, 100, 40}, // 60..100
		{0, 55, 20},  // 30..50
		{12, 28, 0},
		{0, 12, 10},
	} {
		if d, _, _, _, _ := gap(ss, at(tc.from), at(tc.to)); d != time.Duration(tc.want)*time.Millisecond {
			t.Errorf("gap [%d, %d] = %v, want %dms", tc.from, tc.to, d, tc.want)
		}
	}
}

// TestWorkloadSamples: what the sampler saw is summarised in findings.
func TestWorkloadSamples(t *testing.T) {
	a := newAnalysis()
	s1, s2 := a.session("s1", time.Second), a.session("s2", time.Second)
	s1.member, s2.member = "m1", "m2"
	a.members = map[string]*wsession{"m1": s1, "m2": s2}
	a.byName = [][]*whold{nil}
	a.samples = [][]sample{{
		{sent: a.at(0), got: a.at(1), value: "~1"},
		{sent: a.at(100), got: a.at(101), value: "m1:5", queue: []string{"m2"}},
		{sent: a.at(200), got: a.at(201), value: "~5"},
	}}
	if q := a.queuedShare(0, s2, a.at(50), a.at(250)); q != 0.5 {
		t.Fatalf("queued share %v, want 0.5", q)
	}
	if q := a.queuedShare(0, s1, a.at(150), a.at(250)); q != 0.5 {
		t.Fatalf("owner share %v, want 0.5", q)
	}
	got := a.redisDuring(0, a.at(150), a.at(250))
	for _, want := range []string{"t=100.0ms held by s1 (holding NOTHING by the record), queue [s2]", "t=200.0ms free, queue empty"} {
		if !strings.Contains(got, want) {
			t.Fatalf("%q lacks %q", got, want)
		}
	}
}

// TestQueueOf: queue entries are "<member>|<deadline ms>|<lease ms>"; one
// that does not parse (a bare member, as an older baton queued) is dead,
// as is one whose deadline is past, as the scripts take them.
func TestQueueOf(t *testing.T) {
	q := []string{"bare", "m1|1000|500", "m2|999|500", "m3|x|500", "a|b|1000|500", "m1|2000|500"}
	members, entries, live := queueOf(q, 1000)
	if want := []string{"bare", "m1", "m2", "m3|x|500", "a|b", "m1"}; fmt.Sprint(members) != fmt.Sprint(want) {
		t.Errorf("members %q, want %q", members, want)
	}
	if want := []string{"m1", "a|b"}; fmt.Sprint(live) != fmt.Sprint(want) {
		t.Errorf("live %q, want %q", live, want)
	}
	if entries["m1"] != "m1|1000|500" || entries["bare"] != "bare" || len(entries) != 5 {
		t.Errorf("entries %q", entries)
	}
	if got := queueMembers(q); fmt.Sprint(got) != fmt.Sprint(members) {
		t.Errorf("queueMembers %q, want %q", got, members)
	}
}

// TestWorkloadOutsideChange: after an outside change (a DEL of a held
// key), the overlap oracle passes an old holder told within TellBound of
// the new holder's acquisition and fails one told later or never; a hold
// younger than FirstCheck at the change may hear of it at its first check
// (with FirstCheck 0, at once, or it is late); and the loss oracle excuses
// the loss of a hold whose key was changed from outside.
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
