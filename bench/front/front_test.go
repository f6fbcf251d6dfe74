package front

import (
	"math"
	"slices"
	"testing"
)

// The cross-8x2 figures of the hand-off decision: baton's tail far below
// every polling interval's, its CPU between theirs.
var crossPoints = []Point{
	{Library: "baton", P99US: 22_000, CPUUS: 100, Work: 0.74},
	{Library: "polling-1ms", P99US: 143_000, CPUUS: 311, Work: 0.64},
	{Library: "polling-5ms", P99US: 260_000, CPUUS: 120, Work: 0.75},
	{Library: "polling-20ms", P99US: 496_000, CPUUS: 91, Work: 0.78},
	{Library: "polling-50ms", P99US: 557_000, CPUUS: 83, Work: 0.76},
}

func TestBatonOnTheFrontWithCostAndWorkTargets(t *testing.T) {
	v := Judge("cross-8x2", Util, crossPoints)
	if v.Missing != "" || !v.OnFront || len(v.DominatedBy) != 0 {
		t.Fatalf("not on the front: %+v", v)
	}
	if v.CheapestPeer != "polling-50ms" || math.Abs(v.CPURatio-100.0/83) > 1e-9 || v.CPUOK {
		t.Errorf("cheapest %s ratio %.3f ok %v: 1.20x is the bound", v.CheapestPeer, v.CPURatio, v.CPUOK)
	}
	if v.BestWorkLib != "polling-20ms" || v.WorkOK || math.Abs(v.WorkRatio-0.74/0.78) > 1e-9 {
		t.Errorf("best work %s ratio %.3f ok %v: 0.949 is more than 5 %% below", v.BestWorkLib, v.WorkRatio, v.WorkOK)
	}
	if v.Holds {
		t.Error("holds with CPU 1.2x above the cheapest peer")
	}
}

func TestPeerAtLeastAsGoodOnBothTakesBatonOffTheFront(t *testing.T) {
	pts := []Point{
		{Library: "baton", P99US: 500, CPUUS: 31.9, Work: 24_652},
		{Library: "polling-1ms", P99US: 480, CPUUS: 23.5, Work: 34_980},
		{Library: "polling-50ms", P99US: 500, CPUUS: 31.9, Work: 30_000}, // a tie counts
		{Library: "bsm", P99US: 400, CPUUS: 40, Work: 18_525},
		{Library: "baton-nocache", P99US: 1, CPUUS: 1, Work: 1e6}, // baton itself: no peer
	}
	v := Judge("random-names", Throughput, pts)
	if v.OnFront || !slices.Equal(v.DominatedBy, []string{"polling-1ms", "polling-50ms"}) {
		t.Fatalf("dominated by %v, on front %v", v.DominatedBy, v.OnFront)
	}
	if v.BestWorkLib != "polling-1ms" || v.WorkOK || v.CheapestPeer != "polling-1ms" || v.Holds {
		t.Fatalf("%+v", v)
	}
}

func TestAllThreeTargetsHold(t *testing.T) {
	pts := []Point{
		{Library: "baton", P99US: 30_000, CPUUS: 29, Work: 0.95},
		{Library: "redsync", P99US: 847_000, CPUUS: 72, Work: 0.52},
		{Library: "polling-50ms", P99US: 1_220_000, CPUUS: 26, Work: 0.93},
	}
	v := Judge("standard", Util, pts)
	if !v.Holds || !v.OnFront || !v.CPUOK || !v.WorkOK || v.BestWorkLib != "baton" || v.WorkRatio != 1 {
		t.Fatalf("%+v", v)
	}
}

func TestBrokenOrMissingPointsAreNotCounted(t *testing.T) {
	nan := math.NaN()
	pts := []Point{
		{Library: "baton", P99US: 10, CPUUS: 10, Work: 1},
		{Library: "bsm", P99US: 1, CPUUS: 1, Work: 1, Problems: true}, // overlapped: not a peer result
		{Library: "redsync", P99US: nan, CPUUS: 1, Work: 0},           // no acquisition
		{Library: "polling-1ms", P99US: 20, CPUUS: 20, Work: 1},
	}
	v := Judge("s", Util, pts)
	if !v.OnFront || v.CheapestPeer != "polling-1ms" {
		t.Fatalf("%+v", v)
	}
	if v := Judge("s", Util, pts[1:]); v.Missing == "" {
		t.Fatal("a verdict without baton")
	}
	if v := Judge("s", Util, pts[:3]); v.Missing != "no peer point" {
		t.Fatalf("missing %q", v.Missing)
	}
	broken := append([]Point{{Library: "baton", P99US: 1, CPUUS: 1, Problems: true}}, pts[3])
	if v := Judge("s", Util, broken); v.Missing == "" || v.OnFront {
		t.Fatalf("a verdict on a broken baton run: %+v", v)
	}
}

func TestFrontIsTheUndominatedPointsByCPU(t *testing.T) {
	got := Front(crossPoints)
	var libs []string
	for _, p := range got {
		libs = append(libs, p.Library)
	}
	if !slices.Equal(libs, []string{"polling-50ms", "polling-20ms", "baton"}) {
		t.Fatalf("front %v", libs)
	}
}

func TestIsPeer(t *testing.T) {
	for lib, want := range map[string]bool{"baton": false, "baton-nocache": false, "baton+MinReplicas1": false, "baton-nested": false,
		"polling-1ms": true, "rueidislock": true, "counter-5ms": true, "batonx": true} {
		if IsPeer(lib) != want {
			t.Errorf("IsPeer(%q) = %v", lib, !want)
		}
	}
}
