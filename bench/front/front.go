// Package front judges baton against its peers in one contention shape:
// each library (and each polling interval) is a point of wait p99 against
// Redis CPU per acquisition, and baton is on the front when no peer
// configuration is at least as good on both. Two more targets go with it:
// baton's CPU within CPUSlack of the cheapest peer's, and its work
// (utilization, or throughput in shapes without a hold) within WorkSlack
// of the best.
package front

import (
	"math"
	"slices"
	"strings"
)

// Targets.
const (
	// CPUSlack bounds baton's Redis CPU per acquisition over the cheapest
	// peer's.
	CPUSlack = 1.2
	// WorkSlack is the share of the best utilization (or throughput)
	// baton must reach.
	WorkSlack = 0.95
)

// Work names what a shape's work is measured by.
type Work string

// Work measures.
const (
	// Util is the share of the time the names were held: for shapes
	// with a hold.
	Util Work = "util"
	// Throughput is acquisitions per second: for shapes without a hold,
	// where utilization is ~0 by definition.
	Throughput Work = "acq/s"
)

// Point is one library's (or polling interval's) result in a shape.
type Point struct {
	Library string  `json:"library"`
	P99US   float64 `json:"wait_p99_us"`
	CPUUS   float64 `json:"cpu_us_per_acq"`
	Work    float64 `json:"work"` // utilization or acq/s, as the Verdict's Work says
	// Problems marks a run that broke a promise (overlaps, errors, hung
	// calls): its point is drawn but not counted.
	Problems bool `json:"problems,omitempty"`
}

// valid reports a point with both coordinates.
func (p Point) valid() bool {
	return !p.Problems && !math.IsNaN(p.P99US) && !math.IsNaN(p.CPUUS) && !math.IsInf(p.P99US, 0) && !math.IsInf(p.CPUUS, 0)
}

// IsPeer reports a library that is another implementation, not baton in
// some configuration (baton, baton-nocache, baton-mutex, ...).
func IsPeer(lib string) bool {
	return lib != "baton" && !strings.HasPrefix(lib, "baton-") && !strings.HasPrefix(lib, "baton+")
}

// Verdict is baton's standing in one shape.
type Verdict struct {
	Shape  string  `json:"shape"`
	Work   Work    `json:"work"`
	Points []Point `json:"points"`
	// Missing, when set, says why there is no verdict (no baton point,
	// no peer); the other fields are then zero.
	Missing string `json:"missing,omitempty"`

	Baton Point `json:"baton"`
	// DominatedBy lists the peers at least as good as baton on both wait
	// p99 and CPU per acquisition.
	DominatedBy []string `json:"dominated_by,omitempty"`
	OnFront     bool     `json:"on_front"`

	CheapestPeer string  `json:"cheapest_peer"`
	CheapestCPU  float64 `json:"cheapest_cpu_us"`
	CPURatio     float64 `json:"cpu_ratio"` // baton's / the cheapest peer's
	CPUOK        bool    `json:"cpu_ok"`    // CPURatio <= CPUSlack

	BestWorkLib string  `json:"best_work_library"`
	BestWork    float64 `json:"best_work"`
	WorkRatio   float64 `json:"work_ratio"` // baton's / the best
	WorkOK      bool    `json:"work_ok"`    // WorkRatio >= WorkSlack

	Holds bool `json:"holds"` // all three
}

// Judge places baton among the points of one shape.
func Judge(shape string, work Work, pts []Point) Verdict {
	v := Verdict{Shape: shape, Work: work, Points: pts}
	bi := slices.IndexFunc(pts, func(p Point) bool { return p.Library == "baton" })
	switch {
	case bi < 0:
		v.Missing = "no baton point"
		return v
	case !pts[bi].valid():
		v.Missing = "baton's run has no wait p99 or CPU figure, or broke a promise"
		return v
	}
	b := pts[bi]
	v.Baton = b
	v.CheapestCPU, v.BestWork, v.BestWorkLib = math.Inf(1), b.Work, b.Library
	for _, p := range pts {
		if !IsPeer(p.Library) || !p.valid() {
			continue
		}
		if p.P99US <= b.P99US && p.CPUUS <= b.CPUUS {
			v.DominatedBy = append(v.DominatedBy, p.Library)
		}
		if p.CPUUS < v.CheapestCPU {
			v.CheapestCPU, v.CheapestPeer = p.CPUUS, p.Library
		}
		if p.Work > v.BestWork {
			v.BestWork, v.BestWorkLib = p.Work, p.Library
		}
	}
	if v.CheapestPeer == "" {
		v.Missing = "no peer point"
		v.CheapestCPU = 0
		return v
	}
	v.OnFront = len(v.DominatedBy) == 0
	v.CPURatio = b.CPUUS / v.CheapestCPU
	v.CPUOK = v.CPURatio <= CPUSlack
	v.WorkRatio = 1
	if v.BestWork > 0 {
		v.WorkRatio = b.Work / v.BestWork
	}
	v.WorkOK = v.WorkRatio >= WorkSlack
	v.Holds = v.OnFront && v.CPUOK && v.WorkOK
	return v
}

// Front returns the points no other valid point is at least as good as on
// both axes and strictly better on one: the Pareto front of the shape,
// baton included, ordered by CPU.
func Front(pts []Point) []Point {
	var out []Point
	for i, p := range pts {
		if !p.valid() {
			continue
		}
		dominated := false
		for j, q := range pts {
			if i != j && q.valid() && q.P99US <= p.P99US && q.CPUUS <= p.CPUUS && (q.P99US < p.P99US || q.CPUUS < p.CPUUS) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Point) int {
		switch {
		case a.CPUUS < b.CPUUS:
			return -1
		case a.CPUUS > b.CPUUS:
			return 1
		}
		return strings.Compare(a.Library, b.Library)
	})
	return out
}
