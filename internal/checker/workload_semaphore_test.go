package checker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// semAnalysis is newAnalysis for one semaphore of limit permits.
func semAnalysis(limit int) analysisRun {
	a := newAnalysis()
	a.names, a.limits, a.elect = []string{"s"}, []int{limit}, []bool{false}
	return a
}

// permit is analysisRun.hold for an Acquire call.
func (a analysisRun) permit(s *wsession, token uint64, call, acq, unlock int) *whold {
	h := a.hold(s, token, call, acq, unlock)
	h.call.op = opAcquire
	return h
}

func TestWorkloadSemOverlapOracle(t *testing.T) {
	t.Run("limit+1 holders", func(t *testing.T) {
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 1, 0, 1, 50)
		a.permit(a.session("u", time.Second), 2, 0, 2, 60)
		a.permit(a.session("v", time.Second), 3, 0, 20, 70)
		rep := a.check(t, oOverlap, 1)
		if rep.Overlaps != 1 || rep.MaxPermits != 3 || !strings.Contains(rep.Failures[oOverlap][0], "while 2 others held a permit") {
			t.Fatalf("overlaps %d, max permits %d: %v", rep.Overlaps, rep.MaxPermits, rep.Failures[oOverlap])
		}
	})
	t.Run("limit holders", func(t *testing.T) {
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 1, 0, 1, 50)
		a.permit(a.session("u", time.Second), 2, 0, 2, 60)
		a.permit(a.session("v", time.Second), 3, 0, 55, 70) // after s's Unlock
		if rep := a.check(t, oOverlap, 0); rep.MaxPermits != 2 || rep.PermitAcquisitions != 3 {
			t.Fatalf("max permits %d, permits %d", rep.MaxPermits, rep.PermitAcquisitions)
		}
	})
	t.Run("told first", func(t *testing.T) {
		a := semAnalysis(2)
		a.faults = []window{{a.at(0), a.at(1)}}
		h := a.permit(a.session("s", time.Second), 1, 0, 1, 50)
		h.doneAt, h.cause = a.at(15), baton.ErrLockLost
		a.permit(a.session("u", time.Second), 2, 0, 2, 60)
		a.permit(a.session("v", time.Second), 3, 0, 20, 70)
		a.check(t, oOverlap, 0)
	})
}

func TestWorkloadSemTokenOracle(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) {
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 5, 0, 1, 10)
		a.permit(a.session("u", time.Second), 5, 0, 2, 10)
		rep := a.check(t, oToken, 1)
		if !strings.Contains(rep.Failures[oToken][0], "DUPLICATE") {
			t.Fatalf("%v", rep.Failures[oToken])
		}
	})
	t.Run("below one returned a lease before the call", func(t *testing.T) {
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 5, 0, 1, 10)
		a.permit(a.session("u", time.Second), 4, 1100, 1101, 1110)
		a.check(t, oToken, 1)
	})
	t.Run("below one returned within a lease before the call", func(t *testing.T) {
		// A permit granted to u's session before s got 5 reached u's
		// caller after: tokens follow Redis's order, not the calls'.
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 5, 0, 1, 10)
		a.permit(a.session("u", time.Second), 4, 2, 3, 10)
		a.check(t, oToken, 0)
	})
	t.Run("concurrent calls out of order", func(t *testing.T) {
		a := semAnalysis(2)
		a.permit(a.session("s", time.Second), 5, 0, 2, 10)
		a.permit(a.session("u", time.Second), 4, 1, 3, 10) // called before s's returned
		a.check(t, oToken, 0)
	})
}

func TestWorkloadSemIdleOracle(t *testing.T) {
	t.Run("free permit", func(t *testing.T) {
		a := semAnalysis(2)
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.permit(s, 1, 0, 1, 50)
		a.permit(u, 2, 0, 2, 400)
		w := a.wait(v, 10, 300) // one permit free from 51 to 300
		w.op = opAcquire
		rep := a.check(t, oIdle, 1)
		if rep.IdleMax != 249*time.Millisecond || !strings.Contains(rep.Failures[oIdle][0], "fewer than 2 permits") {
			t.Fatalf("idle max %v: %v", rep.IdleMax, rep.Failures[oIdle])
		}
	})
	t.Run("both held", func(t *testing.T) {
		a := semAnalysis(2)
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.permit(s, 1, 0, 1, 350)
		a.permit(u, 2, 0, 2, 400)
		a.wait(v, 10, 300)
		a.check(t, oIdle, 0)
	})
	t.Run("someone ahead", func(t *testing.T) {
		a := semAnalysis(2)
		s, u, v, x := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second), a.session("x", time.Second)
		a.permit(s, 1, 0, 1, 50)
		a.permit(u, 2, 0, 2, 400)
		a.wait(x, 5, 300) // ahead of v's waiter: its own idle wait is the finding
		a.wait(v, 10, 300)
		rep := a.check(t, oIdle, 1)
		if !strings.Contains(rep.Failures[oIdle][0], "by x") {
			t.Fatalf("blamed the wrong waiter: %v", rep.Failures[oIdle])
		}
	})
	t.Run("fault", func(t *testing.T) {
		a := semAnalysis(2)
		a.faults = []window{{a.at(40), a.at(45)}}
		s, u, v := a.session("s", time.Second), a.session("u", time.Second), a.session("v", time.Second)
		a.permit(s, 1, 0, 1, 50)
		a.permit(u, 2, 0, 2, 400)
		a.wait(v, 10, 300)
		a.check(t, oIdle, 0)
	})
}

func TestFreeStretch(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cs := []cover{
		{from: at(0), to: at(30), n: 1},
		{from: at(10), to: at(20), n: 1},
		{from: at(20), to: at(40), n: 1}, // takes over at 20: no gap
		{from: at(60), to: at(70), n: 2},
	}
	for _, tc := range []struct{ limit, from, to, want int }{
		{2, 0, 100, 30}, // 70..100
		{2, 0, 55, 25},  // 30..55 (two busy 10..30, then one, then none)
		{3, 0, 100, 100},
		{1, 0, 100, 30},
		{2, 12, 28, 0},
	} {
		if d, _, _ := freeStretch(cs, tc.limit, at(tc.from), at(tc.to)); d != time.Duration(tc.want)*time.Millisecond {
			t.Errorf("limit %d [%d, %d] = %v, want %dms", tc.limit, tc.from, tc.to, d, tc.want)
		}
	}
}

// TestWorkloadSemLeftovers: a holder field and a queue entry left in a
// semaphore's keys by nobody the run knows are found once every Client
// closed.
//
// ghost.1's client channel has a listener, as a live process's would: a
// closing session's release hands its permit to the first queued session
// without counting the holders (semrelease.lua), and a grant nobody hears
// drops the entry, so without the listener the queue entry could vanish at
// Close, rightly, instead of staying behind (as a holder field, heard).
func TestWorkloadSemLeftovers(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Do(t, "PING").Error(); err != nil {
		t.Fatal(err)
	}
	srv.Listen(t, "wl:c:ghost.1")
	rep, err := RunWorkload(context.Background(), Workload{
		Names:              1,
		Semaphores:         []int{3},
		Duration:           time.Second,
		Sessions:           -1,
		SessionCloseEvery:  -1,
		ClientRestartEvery: -1,
		Options:            func(int) baton.Options { return baton.Options{Redis: srv.Option()} },
		Redis:              srv.Option,
		LeakOptions:        redistest.KnownLeaks(),
	}, func(ctx context.Context) {
		<-ctx.Done()
		// Live holders (deadline in an hour) of every permit, and a queue
		// entry, of slots no session of the run has. (With a permit
		// free, a closing session's dequeue would serve the entry, and
		// drop it, as nobody hears its grant.)
		k := "wl:s:{wl-s0}"
		dl := time.Now().Add(time.Hour).UnixMilli()
		for _, cmd := range [][]string{
			{"HSET", k, "ghost.0", "1:" + itoa(dl), "ghost.2", "2:" + itoa(dl), "ghost.3", "3:" + itoa(dl)},
			{"RPUSH", k + ":q", "ghost.1|" + itoa(dl) + "|1000"},
		} {
			if err := srv.Do(t, cmd...).Error(); err != nil {
				t.Errorf("%v: %v", cmd, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := strings.Join(rep.Failures[oClose], "\n")
	t.Logf("report:\n%s\n(f): %s", rep, msgs)
	if !strings.Contains(msgs, "still has holders [?ghost.0") || !strings.Contains(msgs, "?ghost.1") {
		t.Fatalf("the leftovers were not found: %v", rep.Failures)
	}
	if rep.PermitAcquisitions == 0 {
		t.Fatal("no permit acquired")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestWorkloadElectionOracles: leaderships are permits of a semaphore of
// 1, whose tokens also rise in acquisition order.
func TestWorkloadElectionOracles(t *testing.T) {
	elect := func() analysisRun {
		a := semAnalysis(1)
		a.elect = []bool{true}
		return a
	}
	t.Run("two leaders", func(t *testing.T) {
		a := elect()
		a.permit(a.session("s", time.Second), 1, 0, 1, 50).call.op = opCampaign
		a.permit(a.session("u", time.Second), 2, 0, 20, 60).call.op = opCampaign
		if rep := a.check(t, oOverlap, 1); rep.Leaderships != 2 || rep.PermitAcquisitions != 0 {
			t.Fatalf("%d leaderships, %d permits", rep.Leaderships, rep.PermitAcquisitions)
		}
	})
	t.Run("token order", func(t *testing.T) {
		a := elect()
		a.permit(a.session("s", time.Second), 5, 0, 1, 10)
		a.permit(a.session("u", time.Second), 4, 0, 11, 20) // called before s's returned: only (c) of locks sees it
		a.check(t, oToken, 1)
	})
}

// TestWorkloadSemFIFOOracle: the semaphore FIFO oracle fails a waiter that
// another session's later calls overtook more often than its bound (5
// with no goroutine of its own session ahead of it, 7 with one), and
// passes one overtaken 5 times.
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

// TestWorkloadObservedLeaders: the Observe oracle fails a leader that an
// observer reported while its Campaign returned a ctx error (a phantom),
// and passes it when the Campaign returned that leadership.
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
