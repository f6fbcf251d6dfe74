package workload

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/batonlock/baton/bench/redisx"
)

// Metrics is the per-library, per-scenario report line.
type Metrics struct {
	Library  string `json:"library"`
	Scenario string `json:"scenario"`
	Procs    bool   `json:"procs"`

	Acquisitions int `json:"acquisitions"`
	AcqPerSec    Num `json:"acq_per_sec"`
	Util         Num `json:"utilisation"`

	WaitP50US Num `json:"wait_p50_us"`
	WaitP99US Num `json:"wait_p99_us"`
	WaitMaxUS Num `json:"wait_max_us"`

	Handoffs  int `json:"handoffs"`
	GapP50US  Num `json:"gap_p50_us"`
	GapP99US  Num `json:"gap_p99_us"`
	UnlockP50 Num `json:"unlock_p50_us"`
	UnlockP99 Num `json:"unlock_p99_us"`
	// CycleP50/P99: Lock wait + Unlock time of one acquisition (the hold
	// left out); in "uncontended" the cost of one Lock+Unlock.
	CycleP50US Num `json:"lock_unlock_p50_us"`
	CycleP99US Num `json:"lock_unlock_p99_us"`

	RedisCommands int64            `json:"redis_commands"`
	RedisCalls    map[string]int64 `json:"redis_calls,omitempty"` // INFO commandstats delta per command, summed over nodes
	RedisCPUSec   float64          `json:"redis_cpu_sec"`
	CmdsPerAcq    Num              `json:"cmds_per_acq"`
	CPUUSPerAcq   Num              `json:"cpu_us_per_acq"`

	Jain Num `json:"jain"`
	// PerGoroutine counts counted acquisitions by global goroutine index
	// (instance*goroutines + goroutine); PerInstance sums them by instance.
	PerGoroutine []int `json:"acq_per_goroutine"`
	PerInstance  []int `json:"acq_per_instance"`

	// Limit is the semaphore's permits (0: a lock). For a semaphore the
	// Overlaps fields count acquisitions beyond the limit.
	Limit            int   `json:"limit,omitempty"`
	Overlaps         int64 `json:"overlaps"`
	OverlapsAtomic   int64 `json:"overlaps_atomic"`
	OverlapsInterval int64 `json:"overlaps_interval"`
	// MaxHolders is the most holders of one name seen at once: the larger
	// of the holder counter's peak (inside the critical section) and the
	// peak of the recorded intervals (MaxHoldersInterval).
	MaxHolders         int64 `json:"max_holders"`
	MaxHoldersInterval int64 `json:"max_holders_interval"`
	HasTokens          bool  `json:"has_tokens"`
	FencingViolations  int   `json:"fencing_violations"`

	LockErrors     map[string]int `json:"lock_errors,omitempty"`
	UnlockErrors   map[string]int `json:"unlock_errors,omitempty"`
	Censored       int            `json:"censored_waits"`
	CensoredMaxWUS Num            `json:"censored_max_wait_us"`
	Hung           []string       `json:"hung,omitempty"`
	SetupError     string         `json:"setup_error,omitempty"`
	WallSeconds    float64        `json:"wall_seconds"`
	WaitsUS        []float64      `json:"-"` // every counted wait, for charts
	// Runs, when the scenario ran more than once (-runs), are each run's
	// main figures; the others above are then medians (MedianOf).
	Runs []RunFigures `json:"runs,omitempty"`
}

// Problems reports whether anything that should never happen happened.
func (m *Metrics) Problems() bool {
	return m.Overlaps > 0 || m.FencingViolations > 0 || len(m.LockErrors) > 0 ||
		len(m.UnlockErrors) > 0 || len(m.Hung) > 0 || m.SetupError != ""
}

// Compute turns a run's samples and the Redis counter delta into Metrics.
func Compute(lib, scenario string, p Params, res Result, d redisx.Delta) Metrics {
	m := Metrics{Library: lib, Scenario: scenario, Limit: p.Limit,
		OverlapsAtomic: res.OverlapsAtomic, LockErrors: res.LockErrors, UnlockErrors: res.UnlockErrors,
		Censored: res.Censored, CensoredMaxWUS: us(res.CensoredMaxWait), Hung: res.Hung,
		RedisCommands: d.Commands, RedisCPUSec: d.CPU, RedisCalls: sumCalls(d)}
	D := int64(p.Duration)

	t := m.countSamples(res.Samples, p)
	secs := p.Duration.Seconds()
	m.AcqPerSec = Num(float64(m.Acquisitions) / secs)

	held, gaps := m.checkNames(t.byName, p)
	if n := p.NamesInUse(); n > 0 {
		m.Util = Num(float64(held) / (float64(D) * float64(n) * float64(p.Capacity())))
	}
	m.MaxHolders = max(res.MaxHolders, m.MaxHoldersInterval)
	m.Overlaps = max(m.OverlapsAtomic, m.OverlapsInterval)

	m.latencies(t.waits, gaps, t.unlocks, t.cycles)
	if m.Acquisitions > 0 {
		m.CmdsPerAcq = Num(float64(d.Commands) / float64(m.Acquisitions))
		m.CPUUSPerAcq = Num(d.CPU * 1e6 / float64(m.Acquisitions))
	}
	m.fairness(t.perG, p)
	return m
}

// sumCalls adds up the nodes' commandstats (nil when there are none): the
// report compares libraries by the commands they send, wherever the keys
// live.
func sumCalls(d redisx.Delta) map[string]int64 {
	var calls map[string]int64
	for _, nd := range d.Nodes {
		for k, v := range nd.Calls {
			if calls == nil {
				calls = map[string]int64{}
			}
			calls[k] += v
		}
	}
	return calls
}

// tally is what Compute takes from one pass over a run's samples.
type tally struct {
	perG                   []float64  // counted acquisitions by global goroutine index
	byName                 [][]Sample // every sample, counted or not, by name index
	waits, unlocks, cycles []int64    // of the counted acquisitions, in ns
}

// countSamples counts the acquisitions inside the window [0, Duration]
// and collects their durations. Samples outside it are not counted, but
// still go into byName: their holders held the lock all the same, and the
// overlap and fencing checks must see them.
func (m *Metrics) countSamples(samples []Sample, p Params) tally {
	D := int64(p.Duration)
	t := tally{perG: make([]float64, p.TotalGoroutines()), byName: make([][]Sample, p.Names)}
	tokens := len(samples) > 0
	for _, s := range samples {
		if s.Token == 0 {
			tokens = false
		}
		if int(s.N) < len(t.byName) {
			t.byName[s.N] = append(t.byName[s.N], s)
		}
		if n2 := int(s.Second) - 1; n2 >= 0 && n2 < len(t.byName) {
			// The second name of an all-or-none acquisition: held as
			// long as the first, with a token of its own.
			c := s
			c.N, c.Second, c.Token, c.Token2 = int32(n2), 0, s.Token2, 0
			if c.Token == 0 {
				tokens = false
			}
			t.byName[n2] = append(t.byName[n2], c)
		}
		if s.Acquired > D || s.Acquired < 0 {
			continue // acquired after the deadline (or before the start): not counted
		}
		m.Acquisitions++
		if int(s.G) < len(t.perG) {
			t.perG[s.G]++
		}
		t.waits = append(t.waits, s.Acquired-s.Start)
		t.unlocks = append(t.unlocks, s.Released-s.Release)
		t.cycles = append(t.cycles, (s.Acquired-s.Start)+(s.Released-s.Release))
	}
	m.HasTokens = tokens
	return t
}

// checkNames sorts each name's samples by Acquired (in place) and checks
// what only that order shows: holders at once beyond capacity, hand-off
// gaps, fencing tokens out of order. It returns the time held inside the
// window, summed over the names, and the hand-off gaps.
func (m *Metrics) checkNames(byName [][]Sample, p Params) (held int64, gaps []int64) {
	D := int64(p.Duration)
	for _, ss := range byName {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Acquired < ss[j].Acquired })
		if p.ReadPercent > 0 {
			held += m.readWriteName(ss, D)
			continue
		}
		for _, s := range ss {
			// time held, clipped to the window
			a, r := max(s.Acquired, 0), min(s.Release, D)
			if r > a {
				held += r - a
			}
		}
		peak, over := concurrency(ss, p.Capacity())
		m.MaxHoldersInterval = max(m.MaxHoldersInterval, peak)
		if p.Limit > 0 {
			m.OverlapsInterval += over
			gaps = append(gaps, permitGaps(ss, p.Capacity(), D)...)
			if m.HasTokens {
				m.FencingViolations += tokenOrderViolations(ss)
			}
			continue
		}
		gaps = append(gaps, m.lockHandoffs(ss, D)...)
	}
	return held, gaps
}

// readWriteName checks one read-write lock's samples, sorted by
// Acquired: a writer holds it alone, readers share it with readers only;
// tokens rise with every writer (readers granted together may share one).
// It returns the time the name was held by anyone inside [0, deadline]:
// a read-write lock's utilization is the time it was not free. Hand-off
// gaps are not defined for it.
func (m *Metrics) readWriteName(ss []Sample, deadline int64) (held int64) {
	endAll, endW := int64(math.MinInt64), int64(math.MinInt64)
	var from, to int64 = 0, 0 // the union's current interval, clipped
	for _, s := range ss {
		if s.Acquired < endW || !s.Shared && s.Acquired < endAll {
			m.OverlapsInterval++
		}
		endAll = max(endAll, s.Release)
		if !s.Shared {
			endW = max(endW, s.Release)
		}
		a, r := max(s.Acquired, 0), min(s.Release, deadline)
		switch {
		case r <= a:
		case a > to:
			held += to - from
			from, to = a, r
		default:
			to = max(to, r)
		}
	}
	held += to - from
	peak, _ := concurrency(ss, math.MaxInt32)
	m.MaxHoldersInterval = max(m.MaxHoldersInterval, peak)
	if m.HasTokens {
		m.FencingViolations += readWriteTokenViolations(ss)
	}
	return held
}

// readWriteTokenViolations checks a read-write lock's tokens in real-time
// order: an acquisition that began after a writer's had returned carries a
// larger token, and a writer's one larger than every token returned before
// it began; no writer shares its token. Readers hold together, and a
// reader's token may be below another reader's (baton's RWMutex doc): a
// store that fences them keeps the highest writer's token.
func readWriteTokenViolations(ss []Sample) int {
	byStart := append([]Sample(nil), ss...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	bad := 0
	var maxTok, maxW uint64
	j := 0
	for _, s := range byStart {
		for j < len(ss) && ss[j].Acquired < s.Start {
			maxTok = max(maxTok, ss[j].Token)
			if !ss[j].Shared {
				maxW = max(maxW, ss[j].Token)
			}
			j++
		}
		if j > 0 && (s.Token <= maxW || !s.Shared && s.Token <= maxTok) {
			bad++
		}
	}
	writers := map[uint64]bool{}
	for _, s := range ss {
		if !s.Shared {
			writers[s.Token] = true
		}
	}
	seen := map[uint64]int{}
	for _, s := range ss {
		seen[s.Token]++
	}
	for tok := range writers {
		if seen[tok] > 1 {
			bad += seen[tok] - 1
		}
	}
	return bad
}

// lockHandoffs checks one lock name's samples, sorted by Acquired, against
// the previous holders: a lock has one holder at a time and its tokens
// rise with every holder. It returns the hand-off gaps.
func (m *Metrics) lockHandoffs(ss []Sample, deadline int64) (gaps []int64) {
	var maxEnd int64 = math.MinInt64
	for i, s := range ss {
		// interval overlap: acquired before an earlier holder began releasing
		if i > 0 && s.Acquired < maxEnd {
			m.OverlapsInterval++
		}
		maxEnd = max(maxEnd, s.Release)
		if i > 0 {
			prev := ss[i-1]
			// a hand-off: this acquirer was already waiting when the
			// previous holder began its unlock
			if s.Start < prev.Release && s.Acquired <= deadline {
				gaps = append(gaps, s.Acquired-prev.Release)
			}
			if m.HasTokens && s.Token <= prev.Token {
				m.FencingViolations++
			}
		}
	}
	return gaps
}

// latencies sorts the durations (in place) to read their percentiles, and
// keeps every wait in WaitsUS for the charts.
func (m *Metrics) latencies(waits, gaps, unlocks, cycles []int64) {
	sortI(waits)
	sortI(gaps)
	sortI(unlocks)
	sortI(cycles)
	m.WaitP50US, m.WaitP99US = us(pct(waits, 50)), us(pct(waits, 99))
	if len(waits) > 0 {
		m.WaitMaxUS = us(waits[len(waits)-1])
	}
	m.Handoffs = len(gaps)
	m.GapP50US, m.GapP99US = us(pct(gaps, 50)), us(pct(gaps, 99))
	m.UnlockP50, m.UnlockP99 = us(pct(unlocks, 50)), us(pct(unlocks, 99))
	m.CycleP50US, m.CycleP99US = us(pct(cycles, 50)), us(pct(cycles, 99))
	m.WaitsUS = make([]float64, len(waits))
	for i, w := range waits {
		m.WaitsUS[i] = float64(us(w))
	}
}

// fairness records how the acquisitions spread over the goroutines and
// instances: a lock can have a high throughput by starving most waiters.
func (m *Metrics) fairness(perG []float64, p Params) {
	m.Jain = Num(jain(perG))
	m.PerGoroutine = make([]int, len(perG))
	m.PerInstance = make([]int, p.Instances)
	for i, v := range perG {
		m.PerGoroutine[i] = int(v)
		if p.Goroutines > 0 {
			m.PerInstance[i/p.Goroutines] += int(v)
		}
	}
}

// concurrency sweeps one name's intervals [Acquired, Release] (a release
// at the same instant as an acquisition comes first): the most holders at
// once, and the acquisitions that found capacity holders already.
func concurrency(ss []Sample, capacity int) (peak, over int64) {
	type ev struct {
		t int64
		d int64
	}
	evs := make([]ev, 0, 2*len(ss))
	for _, s := range ss {
		evs = append(evs, ev{s.Acquired, 1}, ev{s.Release, -1})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t || evs[i].t == evs[j].t && evs[i].d < evs[j].d })
	var n int64
	for _, e := range evs {
		n += e.d
		if e.d > 0 {
			peak = max(peak, n)
			if n > int64(capacity) {
				over++
			}
		}
	}
	return peak, over
}

// permitGaps is the semaphore's hand-off gap: every permit given back
// while some Lock call of the name was waiting (started before, acquired
// after) is paired, oldest free permit first, with the next acquisition:
// gap = that acquisition - the release. Permits free from the start or
// given back while nobody waited are paired too, but yield no gap. With one
// permit and one waiter this is the lock's definition. ss is sorted by
// Acquired.
func permitGaps(ss []Sample, capacity int, deadline int64) []int64 {
	starts := make([]int64, len(ss))
	acqs := make([]int64, len(ss))
	for i, s := range ss {
		starts[i], acqs[i] = s.Start, s.Acquired
	}
	sortI(starts) // acqs is sorted already
	// waiting reports Lock calls pending at t: started before t and not
	// yet acquired.
	waiting := func(t int64) bool {
		st := sort.Search(len(starts), func(i int) bool { return starts[i] >= t })
		ac := sort.Search(len(acqs), func(i int) bool { return acqs[i] >= t })
		return st > ac
	}
	type ev struct {
		t       int64
		release bool
	}
	evs := make([]ev, 0, 2*len(ss))
	for _, s := range ss {
		evs = append(evs, ev{s.Acquired, false}, ev{s.Release, true})
	}
	sort.Slice(evs, func(i, j int) bool {
		return evs[i].t < evs[j].t || evs[i].t == evs[j].t && evs[i].release && !evs[j].release
	})
	type permit struct {
		freed   int64
		handoff bool
	}
	free := make([]permit, capacity, capacity+len(ss))
	var gaps []int64
	for _, e := range evs {
		if e.release {
			free = append(free, permit{e.t, waiting(e.t)})
			continue
		}
		if len(free) == 0 {
			continue // over the limit: counted by concurrency
		}
		p := free[0]
		free = free[1:]
		if p.handoff && e.t <= deadline {
			gaps = append(gaps, e.t-p.freed)
		}
	}
	return gaps
}

// tokenOrderViolations checks a semaphore's fencing tokens, which rise on
// every acquisition of any permit of the name but are not ordered by the
// client-side acquisition time of concurrent callers: an acquisition whose
// Lock call started after another one had returned must carry a larger
// token (and no two may share one). ss is sorted by Acquired.
func tokenOrderViolations(ss []Sample) int {
	byStart := append([]Sample(nil), ss...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	bad := 0
	var maxTok uint64
	j := 0
	for _, s := range byStart {
		for j < len(ss) && ss[j].Acquired < s.Start {
			maxTok = max(maxTok, ss[j].Token)
			j++
		}
		if j > 0 && s.Token <= maxTok {
			bad++
		}
	}
	toks := make([]uint64, len(ss))
	for i, s := range ss {
		toks[i] = s.Token
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i] < toks[j] })
	for i := 1; i < len(toks); i++ {
		if toks[i] == toks[i-1] {
			bad++
		}
	}
	return bad
}

func sortI(x []int64) { sort.Slice(x, func(i, j int) bool { return x[i] < x[j] }) }

// pct is the nearest-rank percentile of sorted x (NaN when empty).
func pct(x []int64, p float64) int64 {
	if len(x) == 0 {
		return math.MinInt64
	}
	i := int(math.Ceil(p/100*float64(len(x)))) - 1
	return x[max(0, min(i, len(x)-1))]
}

func us(ns int64) Num {
	if ns == math.MinInt64 {
		return Num(math.NaN())
	}
	return Num(float64(ns) / float64(time.Microsecond))
}

// Num is a float64 that encodes NaN/Inf as JSON null.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 6, 64), nil
}

// jain is Jain's fairness index (sum x)^2 / (n * sum x^2); 1 is perfectly fair.
func jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if s2 == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(x)) * s2)
}
