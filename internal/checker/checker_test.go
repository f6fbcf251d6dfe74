package checker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.KnownLeaks()...) }

func config(srv *redistest.Server, opt func(i int, o *baton.Options)) Config {
	return Config{
		Clients: 2, Goroutines: 3, Names: 2,
		Duration: time.Second,
		Options: func(i int) baton.Options {
			o := baton.Options{Redis: srv.Option(), LeaseTTL: time.Second}
			if opt != nil {
				opt(i, &o)
			}
			return o
		},
		Redis:       srv.Option,
		LeakOptions: redistest.KnownLeaks(),
	}
}

// TestCleanRun: baton on a healthy server passes, and the report adds up.
func TestCleanRun(t *testing.T) {
	srv := redistest.Start(t)
	rep, err := Run(context.Background(), config(srv, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if rep.Acquisitions == 0 || rep.Counter != int64(rep.WritesApplied) || rep.AppliedInRedis != rep.WritesApplied {
		t.Fatalf("counter %d, applied %d (Redis %d), acquisitions %d", rep.Counter, rep.WritesApplied, rep.AppliedInRedis, rep.Acquisitions)
	}
}

// TestDetectsMissingExclusion: clients with different key prefixes do not
// exclude each other at all. The checker must see overlapping holds and
// lost increments, and Check must fail.
func TestDetectsMissingExclusion(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, func(i int, o *baton.Options) { o.KeyPrefix = fmt.Sprintf("p%d", i) })
	cfg.Hold = 30 * time.Millisecond
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	err = rep.Check()
	if rep.Overlaps == 0 || err == nil || !strings.Contains(err.Error(), "overlapping") {
		t.Fatalf("%d overlaps, Check: %v; want overlaps reported", rep.Overlaps, err)
	}
	if !strings.Contains(err.Error(), "update was lost") && !strings.Contains(err.Error(), "stale counter") {
		t.Fatalf("Check did not report the lost increments: %v", err)
	}
}

// TestPause: a holder paused after its loss check stays paused, holding;
// resumed, it writes and unlocks, and its outcome says so.
func TestPause(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, nil)
	cfg.TrySession = true // and TryLock through sessions of their own
	var out Outcome
	var held bool
	rep, err := Run(context.Background(), cfg, func(ctx context.Context) {
		ctl := ControlFrom(ctx)
		p, err := ctl.Pause(ctx, AfterCheck, func(h Holder) bool { return h.Client == 1 })
		if err != nil {
			t.Error(err)
			return
		}
		held = p.Lock.Err() == nil
		p.Resume()
		out, err = p.Outcome(ctx)
		if err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if !held || !out.Wrote || !out.Applied || out.UnlockErr != nil {
		t.Fatalf("paused holder: held %v, outcome %+v", held, out)
	}
}

// TestAnalysis feeds hand-made records to the analysis.
func TestAnalysis(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	newRun := func() *run {
		return &run{cfg: Config{HangBound: 2 * time.Second}, lease: time.Second, faultStart: t0}
	}
	t.Run("overlap", func(t *testing.T) {
		r := newRun()
		as := []*acq{
			{client: 0, name: "n", token: 1, acquired: at(0), unlockAt: at(100), unlockRet: at(101)},
			{client: 1, name: "n", token: 2, acquired: at(50), unlockAt: at(150), unlockRet: at(151)},
		}
		var rep Report
		r.overlaps(&rep, "n", as)
		if rep.Overlaps != 1 {
			t.Fatalf("overlaps %d, want 1", rep.Overlaps)
		}
	})
	t.Run("told before", func(t *testing.T) {
		r := newRun()
		as := []*acq{
			{client: 0, name: "n", token: 1, acquired: at(0), lost: at(40), unlockAt: at(100), unlockRet: at(101)},
			{client: 1, name: "n", token: 2, acquired: at(50), unlockAt: at(150), unlockRet: at(151)},
		}
		rep := Report{MinLossLead: -1}
		r.overlaps(&rep, "n", as)
		if rep.Overlaps != 0 || rep.LossHandovers != 1 || rep.MinLossLead != 10*time.Millisecond {
			t.Fatalf("overlaps %d, hand-overs %d, lead %v", rep.Overlaps, rep.LossHandovers, rep.MinLossLead)
		}
	})
	t.Run("told too late", func(t *testing.T) {
		r := newRun()
		as := []*acq{
			{client: 0, name: "n", token: 1, acquired: at(0), lost: at(60), unlockAt: at(100), unlockRet: at(101)},
			{client: 1, name: "n", token: 2, acquired: at(50), unlockAt: at(150), unlockRet: at(151)},
		}
		var rep Report
		r.overlaps(&rep, "n", as)
		if rep.Overlaps != 1 {
			t.Fatalf("overlaps %d, want 1", rep.Overlaps)
		}
	})
	t.Run("excused by data loss", func(t *testing.T) {
		r := newRun()
		r.cfg.DataLoss = true
		r.losses = []window{{at(20), at(30)}}
		as := []*acq{
			{client: 0, name: "n", token: 1, acquired: at(0), unlockAt: at(100), unlockRet: at(101)},
			{client: 1, name: "n", token: 2, acquired: at(50), unlockAt: at(150), unlockRet: at(151)},
		}
		var rep Report
		r.overlaps(&rep, "n", as)
		if rep.Overlaps != 0 || rep.ExcusedOverlaps != 1 {
			t.Fatalf("overlaps %d, excused %d", rep.Overlaps, rep.ExcusedOverlaps)
		}
	})
	t.Run("hang", func(t *testing.T) {
		r := newRun()
		r.names = []string{"n"}
		byName := map[string][]*acq{"n": {
			{name: "n", acquired: at(0), unlockAt: at(100), unlockRet: at(100)},
			{name: "n", acquired: at(3500), unlockAt: at(3600), unlockRet: at(3600)},
		}}
		r.calls = []call{
			{client: 1, name: "n", start: at(10), end: at(3500)},            // free from 100 to 3500: a hang
			{client: 2, name: "n", start: at(10), end: at(1500)},            // free 1.4 s: within the bound
			{client: 3, name: "n", start: at(10), end: at(9000), try: true}, // TryLock: not a waiter
		}
		var rep Report
		r.hangs(&rep, byName, at(0))
		if rep.Hangs != 1 || rep.MaxIdleWait != 3400*time.Millisecond {
			t.Fatalf("hangs %d, max idle wait %v", rep.Hangs, rep.MaxIdleWait)
		}
		// Before the fault ended, waiting is no hang.
		rep = Report{}
		r.hangs(&rep, byName, at(3000))
		if rep.Hangs != 0 {
			t.Fatalf("hangs %d counted during the fault", rep.Hangs)
		}
	})
}

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", baton.ErrLockLost), "lost"},
		{baton.ErrClosed, "closed"},
		{fmt.Errorf("%w: busy", baton.ErrNotAcquired), "not-acquired"},
		{fmt.Errorf("baton: lock: %w", context.DeadlineExceeded), "context"},
		{fmt.Errorf("baton: unlock: %w", io.EOF), "network"},
		{errors.New("something"), "other"},
	} {
		if got := Kind(tc.err); got != tc.want {
			t.Errorf("Kind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// A Redis error reply, as rueidis returns it.
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rerr := rc.Do(context.Background(), rc.B().Evalsha().Sha1("0000000000000000000000000000000000000000").Numkeys(0).Build()).Error()
	if got := Kind(fmt.Errorf("baton: %w", rerr)); got != "redis:NOSCRIPT" {
		t.Fatalf("Kind(%v) = %q, want redis:NOSCRIPT", rerr, got)
	}
}

// TestDataLossTellBound: planted findings for holders told late of a data
// loss (Config.DataLoss). A holder told of its loss within
// Config.TellBound of its successor's acquisition is no overlap; one told
// later, or never, is; a hold too young at the loss to be tracked hears of
// it at its first check (Config.FirstCheck) and is not late.
func TestDataLossTellBound(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	overlap := func(lost, acquired int) Report {
		r := &run{cfg: Config{DataLoss: true, TellBound: 10 * time.Millisecond, FirstCheck: 50 * time.Millisecond}, lease: time.Second, faultStart: t0}
		r.losses = []window{{at(200), at(210)}} // the hold is 200 ms old: tracked
		a := &acq{client: 0, name: "n", token: 1, start: at(0), acquired: at(acquired), unlockAt: at(400), unlockRet: at(401)}
		if lost > 0 {
			a.lost = at(lost)
		}
		rep := Report{MinLossLead: -1}
		r.overlaps(&rep, "n", []*acq{a, {client: 1, name: "n", token: 2, acquired: at(220), unlockAt: at(300), unlockRet: at(301)}})
		return rep
	}
	if rep := overlap(225, 0); rep.Overlaps != 0 || rep.ToldInTime != 1 {
		t.Fatalf("told 5 ms after: %d overlaps, %d in time", rep.Overlaps, rep.ToldInTime)
	}
	rep := overlap(260, 0)
	if rep.Overlaps != 1 || rep.ToldLate != 1 || !strings.Contains(strings.Join(rep.failures, "\n"), "told of its loss 40ms after that") {
		t.Fatalf("told 40 ms after: %d overlaps, %d late: %v", rep.Overlaps, rep.ToldLate, rep.failures)
	}
	if rep := overlap(0, 0); rep.Overlaps != 1 {
		t.Fatalf("never told: %d overlaps", rep.Overlaps)
	}
	// A hold 10 ms old at the loss hears of it at its first check (50 ms in).
	if rep := overlap(238, 190); rep.Overlaps != 0 {
		t.Fatalf("young hold told at its first check: %d overlaps: %v", rep.Overlaps, rep.failures)
	}
}
