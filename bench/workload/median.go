package workload

import (
	"math"
	"sort"
)

// RunFigures are one run's main figures, kept beside the medians.
type RunFigures struct {
	AcqPerSec   Num `json:"acq_per_sec"`
	Util        Num `json:"utilisation"`
	WaitP99US   Num `json:"wait_p99_us"`
	CPUUSPerAcq Num `json:"cpu_us_per_acq"`
}

// MedianOf combines runs of one library in one scenario: every figure is
// the median over the runs (a run without it, NaN, left out); what must
// never happen (overlaps, fencing regressions, errors, hung calls) is
// summed, so that one bad run shows. The wait samples drawn are the run
// whose wait p99 is the median's. ms must not be empty.
func MedianOf(ms []Metrics) Metrics {
	if len(ms) == 1 {
		return ms[0]
	}
	m := ms[medianIndex(ms, func(x Metrics) Num { return x.WaitP99US })]
	m.LockErrors, m.UnlockErrors, m.Hung = nil, nil, nil
	m.Overlaps, m.OverlapsAtomic, m.OverlapsInterval, m.FencingViolations = 0, 0, 0, 0
	m.MaxHolders, m.MaxHoldersInterval = 0, 0
	for _, x := range ms {
		m.Runs = append(m.Runs, RunFigures{x.AcqPerSec, x.Util, x.WaitP99US, x.CPUUSPerAcq})
		m.Overlaps += x.Overlaps
		m.OverlapsAtomic += x.OverlapsAtomic
		m.OverlapsInterval += x.OverlapsInterval
		m.FencingViolations += x.FencingViolations
		m.MaxHolders = max(m.MaxHolders, x.MaxHolders)
		m.MaxHoldersInterval = max(m.MaxHoldersInterval, x.MaxHoldersInterval)
		m.LockErrors = mergeCounts(m.LockErrors, x.LockErrors)
		m.UnlockErrors = mergeCounts(m.UnlockErrors, x.UnlockErrors)
		m.Hung = append(m.Hung, x.Hung...)
		if m.SetupError == "" {
			m.SetupError = x.SetupError
		}
	}
	med := func(f func(Metrics) Num) Num {
		var v []float64
		for _, x := range ms {
			if f := float64(f(x)); !math.IsNaN(f) {
				v = append(v, f)
			}
		}
		return Num(median(v))
	}
	m.AcqPerSec, m.Util = med(func(x Metrics) Num { return x.AcqPerSec }), med(func(x Metrics) Num { return x.Util })
	m.WaitP50US, m.WaitP99US, m.WaitMaxUS = med(func(x Metrics) Num { return x.WaitP50US }), med(func(x Metrics) Num { return x.WaitP99US }), med(func(x Metrics) Num { return x.WaitMaxUS })
	m.GapP50US, m.GapP99US = med(func(x Metrics) Num { return x.GapP50US }), med(func(x Metrics) Num { return x.GapP99US })
	m.UnlockP50, m.UnlockP99 = med(func(x Metrics) Num { return x.UnlockP50 }), med(func(x Metrics) Num { return x.UnlockP99 })
	m.CycleP50US, m.CycleP99US = med(func(x Metrics) Num { return x.CycleP50US }), med(func(x Metrics) Num { return x.CycleP99US })
	m.CmdsPerAcq, m.CPUUSPerAcq = med(func(x Metrics) Num { return x.CmdsPerAcq }), med(func(x Metrics) Num { return x.CPUUSPerAcq })
	m.Jain = med(func(x Metrics) Num { return x.Jain })
	return m
}

// medianIndex is the index of the run whose f is the (lower) median.
func medianIndex(ms []Metrics, f func(Metrics) Num) int {
	idx := make([]int, len(ms))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		if v := float64(f(ms[i])); !math.IsNaN(v) {
			return v
		}
		return math.Inf(1)
	}
	sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) < key(idx[b]) })
	return idx[(len(idx)-1)/2]
}

// median of v (NaN when empty); the mean of the middle two for an even
// count.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
