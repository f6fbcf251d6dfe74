package workload

import (
	"math"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/redisx"
)

func TestComputeBasics(t *testing.T) {
	ms := int64(time.Millisecond)
	p := Params{Instances: 1, Goroutines: 2, Names: 1, Duration: 10 * time.Millisecond}
	res := Result{Samples: []Sample{
		// g0 holds [1ms, 3ms); g1 waits from 2ms, gets it at 3.5ms, holds to 5ms
		{G: 0, N: 0, Start: 0, Acquired: 1 * ms, Release: 3 * ms, Released: 3*ms + 100, Token: 1},
		{G: 1, N: 0, Start: 2 * ms, Acquired: 3*ms + ms/2, Release: 5 * ms, Released: 5*ms + 100, Token: 2},
		// acquired after the deadline: not counted
		{G: 0, N: 0, Start: 9 * ms, Acquired: 11 * ms, Release: 12 * ms, Released: 12 * ms, Token: 3},
	}}
	m := Compute("x", "s", p, res, redisx.Delta{Commands: 20, CPU: 0.001})
	if m.Acquisitions != 2 {
		t.Fatalf("acquisitions %d", m.Acquisitions)
	}
	if m.Overlaps != 0 || m.FencingViolations != 0 {
		t.Fatalf("overlaps %d fencing %d", m.Overlaps, m.FencingViolations)
	}
	// held: 2ms + 1.5ms over 10ms
	if got := float64(m.Util); math.Abs(got-0.35) > 1e-9 {
		t.Fatalf("util %v", got)
	}
	if m.Handoffs != 1 || float64(m.GapP50US) != 500 {
		t.Fatalf("handoffs %d gap %v", m.Handoffs, m.GapP50US)
	}
	if float64(m.WaitMaxUS) != 1500 || float64(m.WaitP50US) != 1000 {
		t.Fatalf("waits p50 %v max %v", m.WaitP50US, m.WaitMaxUS)
	}
	if float64(m.CmdsPerAcq) != 10 || math.Abs(float64(m.CPUUSPerAcq)-500) > 1e-6 {
		t.Fatalf("cmds/acq %v cpu %v", m.CmdsPerAcq, m.CPUUSPerAcq)
	}
	if float64(m.Jain) != 1 {
		t.Fatalf("jain %v", m.Jain)
	}
}

func TestComputeDetectsOverlapAndFencing(t *testing.T) {
	ms := int64(time.Millisecond)
	p := Params{Instances: 2, Goroutines: 1, Names: 1, Duration: 10 * time.Millisecond}
	res := Result{Samples: []Sample{
		{G: 0, N: 0, Start: 0, Acquired: 1 * ms, Release: 5 * ms, Token: 7},
		{G: 1, N: 0, Start: 0, Acquired: 4 * ms, Release: 6 * ms, Token: 7},
	}}
	m := Compute("x", "s", p, res, redisx.Delta{})
	if m.OverlapsInterval != 1 || m.Overlaps != 1 {
		t.Fatalf("overlaps %d", m.OverlapsInterval)
	}
	if m.FencingViolations != 1 {
		t.Fatalf("fencing %d", m.FencingViolations)
	}
}

func TestJain(t *testing.T) {
	if j := jain([]float64{1, 1, 1, 1}); j != 1 {
		t.Fatal(j)
	}
	if j := jain([]float64{4, 0, 0, 0}); j != 0.25 {
		t.Fatal(j)
	}
}

func TestMedianOfRuns(t *testing.T) {
	nan := Num(math.NaN())
	ms := []Metrics{
		{Library: "x", AcqPerSec: 100, WaitP99US: 30, CPUUSPerAcq: 10, GapP99US: nan, WaitsUS: []float64{1}},
		{Library: "x", AcqPerSec: 300, WaitP99US: 10, CPUUSPerAcq: 30, GapP99US: 5, Overlaps: 2, LockErrors: map[string]int{"e": 1}, WaitsUS: []float64{2}},
		{Library: "x", AcqPerSec: 200, WaitP99US: 20, CPUUSPerAcq: 20, GapP99US: 7, Hung: []string{"g"}, WaitsUS: []float64{3}},
	}
	m := MedianOf(ms)
	if m.AcqPerSec != 200 || m.WaitP99US != 20 || m.CPUUSPerAcq != 20 || m.GapP99US != 6 || len(m.Runs) != 3 {
		t.Fatalf("%+v", m)
	}
	if m.Overlaps != 2 || m.LockErrors["e"] != 1 || len(m.Hung) != 1 || !m.Problems() || m.WaitsUS[0] != 3 {
		t.Fatalf("problems or samples lost: %+v", m)
	}
	if one := MedianOf(ms[:1]); one.AcqPerSec != 100 || one.Runs != nil {
		t.Fatalf("one run: %+v", one)
	}
}
