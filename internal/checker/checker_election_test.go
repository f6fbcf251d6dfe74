package checker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// TestElectionCleanRun: an election beside a lock on a healthy server
// passes: leaderships are fenced, observers and probers read leaders in
// order, and the run settles.
func TestElectionCleanRun(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, nil)
	cfg.Names, cfg.Elections = 1, 1
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if rep.Leaderships == 0 || rep.Observed == 0 || rep.LeaderReads == 0 || len(rep.Settled) != 1 {
		t.Fatalf("%d leaderships, %d observed, %d Leader calls, settled %v", rep.Leaderships, rep.Observed, rep.LeaderReads, rep.Settled)
	}
}

// TestDetectsForeignLeader: a client outside the run campaigns with a
// value of its own and keeps leading past the run. The observers must
// report a leader no Campaign of the run was, and fail to settle.
func TestDetectsForeignLeader(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, nil)
	cfg.Names, cfg.Elections = -1, 1
	cfg.LockTimeout = time.Second // the workers' Campaigns end soon after the run
	outsider, err := baton.New(baton.Options{Redis: srv.Option()})
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	rep, err := Run(context.Background(), cfg, func(ctx context.Context) {
		e, _ := outsider.Election("chk-e0")
		if _, err := e.Campaign(ctx, "outsider"); err != nil {
			t.Errorf("outsider's Campaign: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	err = rep.Check()
	if rep.ForeignLeaders == 0 || rep.Unconverged == 0 || err == nil || !strings.Contains(err.Error(), "no Campaign of the name used that value") {
		t.Fatalf("%d foreign leaders, %d unconverged, Check: %v", rep.ForeignLeaders, rep.Unconverged, err)
	}
}

// TestJudgeLeaders: a reader that sees a lower token after a higher one,
// or a campaign's value with another token, is reported.
func TestJudgeLeaders(t *testing.T) {
	r := &run{cfg: Config{KeyPrefix: "chk"}}
	r.electNames()
	r.cfg.Elections = 1
	r.el.campaigns["e"] = map[string]*campaign{"a": {a: &acq{token: 10}}, "b": {}}
	now := time.Now()
	var rep Report
	r.judgeLeaders(&rep, "e", "reader", []timedLeader{
		{now, now, baton.Leader{Value: "a", Token: 5}}, // an earlier grant to a, unclaimed
		{now, now, baton.Leader{Value: "a", Token: 10}},
		{now, now, baton.Leader{}},
		{now, now, baton.Leader{Value: "b", Token: 20}},
		{now, now, baton.Leader{Value: "a", Token: 10}}, // lower after higher
		{now, now, baton.Leader{Value: "a", Token: 30}}, // a had returned with 10
		{now, now, baton.Leader{Value: "c", Token: 40}}, // nobody campaigned with c
	})
	if rep.LeaderInversions != 1 || rep.ForeignLeaders != 2 || rep.UnclaimedLeaders != 1 {
		t.Fatalf("%d inversions, %d foreign, %d unclaimed: %v", rep.LeaderInversions, rep.ForeignLeaders, rep.UnclaimedLeaders, rep.failures)
	}
}

// TestPhantomLeaders: planted findings for leaders read after a fault and
// its grace. A leader that no Campaign returned (an earlier grant to the
// same value under another token, or a campaign that returned no
// leadership) is a phantom; one read within the fault's grace is excused.
func TestPhantomLeaders(t *testing.T) {
	t0 := time.Now()
	r := &run{cfg: Config{KeyPrefix: "chk", FaultGrace: time.Second}, faultStart: t0, faultEnd: t0}
	r.electNames()
	r.el.campaigns["e"] = map[string]*campaign{"a": {a: &acq{token: 10}}, "b": {}}
	late := t0.Add(2 * time.Second) // after the fault and its grace
	read := func(at time.Time, l baton.Leader) timedLeader { return timedLeader{at, at, l} }
	var rep Report
	r.judgeLeaders(&rep, "e", "reader", []timedLeader{
		read(late, baton.Leader{Value: "a", Token: 5}),  // an earlier grant to a, which returned 10
		read(late, baton.Leader{Value: "a", Token: 10}), // a's
		read(late, baton.Leader{Value: "b", Token: 20}), // b returned no leadership
	})
	if rep.PhantomLeaders != 2 || rep.ForeignLeaders != 0 {
		t.Fatalf("%d phantoms, %d foreign: %v", rep.PhantomLeaders, rep.ForeignLeaders, rep.failures)
	}
	rep = Report{}
	r.judgeLeaders(&rep, "e", "reader", []timedLeader{read(t0.Add(500*time.Millisecond), baton.Leader{Value: "b", Token: 20})})
	if rep.PhantomLeaders != 0 {
		t.Fatalf("a phantom read in the fault's grace was not excused: %v", rep.failures)
	}
}
