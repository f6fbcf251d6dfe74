package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// Planted findings for what Run judges since issue 16: holders told late
// of a data loss (Config.TellBound), and leaders whose Campaign did not
// return them.

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
