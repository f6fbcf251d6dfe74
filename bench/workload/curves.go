package workload

import (
	"math"
	"sort"
	"time"

	"github.com/batonlock/baton/bench/redisx"
)

// A cost curve measures how baton's cost grows with one quantity: the
// sessions waiting on one name, the names a process has used, the locks
// it holds, and (one point each) standalone Redis against Redis Cluster.

// CurvePresets are the cost curves, in run order (the "curves" set).
func CurvePresets() []Scenario {
	ms := time.Millisecond
	var shape Params
	for _, s := range Presets() {
		if s.Name == "names-64" {
			shape = s.Params
		}
	}
	shape.Duration = 3 * time.Second
	return []Scenario{
		{Name: "curve-waiters", About: "sessions waiting on one name, spread over 4 processes (one client each); a holder hands off every ~5 ms",
			Curve: &CurveParams{Kind: CurveWaiters, Sizes: []int{10, 100, 1000}, Procs: 4, Hold: 5 * ms, SemHold: 20 * ms, Limit: 4,
				Idle: 2 * time.Second, Wait: 4 * time.Second, Handoff: 3 * time.Second}, Libs: []string{"baton"}},
		{Name: "curve-names", About: "names each locked and unlocked once through one client",
			Curve: &CurveParams{Kind: CurveNames, Sizes: []int{10_000, 100_000, 1_000_000}, Real: 100_000}, Libs: []string{"baton"}},
		{Name: "curve-held", About: "locks held by one client across renewal ticks",
			Curve: &CurveParams{Kind: CurveHeld, Sizes: []int{1000, 10_000, 100_000},
				Holding: HoldingParams{LeaseTTL: 3 * time.Second, Periods: 3}}, Libs: []string{"baton"}},
		{Name: "curve-commands", About: "Redis commands per acquisition by command, standalone against a 3-primary Redis Cluster, 64 names",
			Curve: &CurveParams{Kind: CurveCommands, Shape: shape}, Libs: []string{"baton"}},
	}
}

// FrontShapes are the contention shapes whose front make bench draws: wait
// p99 against Redis CPU per acquisition, baton against every peer
// configuration.
var FrontShapes = []string{"standard", "cross-8x2", "procs-16", "alternating", "random-names", "semaphore", "read-heavy", "transfer"}

// CurveKind names a cost curve.
type CurveKind string

// Curves.
const (
	// CurveWaiters: sessions queued on one name, spread over processes,
	// first only waiting behind a holder, then taking turns.
	CurveWaiters CurveKind = "waiters"
	// CurveNames: names locked once each through one client.
	CurveNames CurveKind = "names"
	// CurveHeld: locks held by one client across renewal ticks.
	CurveHeld CurveKind = "held"
	// CurveCommands: Redis commands per acquisition by command name, the
	// same shape on a standalone server and on the cluster.
	CurveCommands CurveKind = "commands"
)

// CurveParams is one cost curve's setup.
type CurveParams struct {
	Kind  CurveKind `json:"kind"`
	Sizes []int     `json:"sizes,omitempty"` // the quantity, one point each, ascending

	// Waiters: the sessions are spread over Procs processes (one baton
	// client each); each holds Hold per turn (a semaphore of SemLimit
	// permits: SemHold, so that a permit comes free every Hold too).
	// Redis is measured with nobody waiting for Idle, with everyone
	// queued for Wait, and while they take turns for Handoff, once each
	// session had its first turn (the steady state).
	Procs   int           `json:"procs,omitempty"`
	Hold    time.Duration `json:"hold,omitempty"`
	SemHold time.Duration `json:"sem_hold,omitempty"`
	Limit   int           `json:"sem_limit,omitempty"`
	Idle    time.Duration `json:"idle,omitempty"`
	Wait    time.Duration `json:"wait,omitempty"`
	Handoff time.Duration `json:"handoff,omitempty"`

	// Names: names above Real are not locked through the client (a
	// cheaper measurement): Redis is filled with copies of the keys the
	// last real name left (DUMP/RESTORE under the new names, same TTL),
	// and the client's figures are not measured there.
	Real int `json:"real,omitempty"`

	// Held: lease and hold of each point (Locks is the size).
	Holding HoldingParams `json:"holding,omitzero"`

	// Commands: the shape run on both topologies, baton only.
	Shape Params `json:"shape,omitzero"`
}

// CurveResult is what a curve measured; one of the slices is filled, by
// Kind.
type CurveResult struct {
	Kind     CurveKind        `json:"kind"`
	Waiters  []WaitersPoint   `json:"waiters,omitempty"`
	Names    []NamesPoint     `json:"names,omitempty"`
	Held     []HoldingMetrics `json:"held,omitempty"`
	Commands *CommandsResult  `json:"commands,omitempty"`
	Notes    []string         `json:"notes,omitempty"`
}

// WaitersPoint is one size of the waiters curve, for a lock or a
// semaphore.
type WaitersPoint struct {
	Primitive string `json:"primitive"` // "lock" or "semaphore"
	Sessions  int    `json:"sessions"`
	Procs     int    `json:"procs"`
	Limit     int    `json:"limit,omitempty"`

	IdleCPU      Num     `json:"idle_cpu"`         // Redis CPU s/s, clients connected, nobody waiting
	WaitCPU      Num     `json:"wait_cpu"`         // Redis CPU s/s above IdleCPU while every session waits
	WaitCmds     Num     `json:"wait_cmds"`        // Redis commands/s above idle while every session waits
	QueueSecs    float64 `json:"queue_seconds"`    // from the first Lock call until every session waited
	RotationSecs float64 `json:"rotation_seconds"` // turns taken before the hand-off window, so that every session had one
	HandoffSecs  float64 `json:"handoff_seconds"`

	Handoffs        int                `json:"handoffs"`
	CPUPerHandoffUS Num                `json:"cpu_us_per_handoff"`
	CmdsPerHandoff  Num                `json:"cmds_per_handoff"`
	CallsPerHandoff map[string]float64 `json:"calls_per_handoff,omitempty"`
	GapP50US        Num                `json:"gap_p50_us"`
	GapP99US        Num                `json:"gap_p99_us"`
	// Turns is the hand-off window's contention metrics (overlaps,
	// fencing, errors; acq/s and util over the window).
	Turns Metrics `json:"turns"`
	Error string  `json:"error,omitempty"`
}

// Problems reports a point that failed or saw something that must never
// happen.
func (w WaitersPoint) Problems() bool { return w.Error != "" || w.Turns.Problems() }

// WaitersFrom computes a waiters point from Redis's counters over the
// three windows (idle: nobody waits; wait: every session waits; turns:
// they take turns) and the turns' metrics (computed over the turns'
// window).
func WaitersFrom(w WaitersPoint, idle, wait, turns redisx.Delta, m Metrics) WaitersPoint {
	rate := func(d redisx.Delta, x float64) float64 {
		if d.Elapsed <= 0 {
			return math.NaN()
		}
		return x / d.Elapsed.Seconds()
	}
	w.IdleCPU = Num(rate(idle, idle.CPU))
	w.WaitCPU = Num(rate(wait, wait.CPU) - rate(idle, idle.CPU))
	w.WaitCmds = Num(rate(wait, float64(wait.Commands)) - rate(idle, float64(idle.Commands)))
	w.HandoffSecs = turns.Elapsed.Seconds()
	w.Turns = m
	w.Handoffs = m.Acquisitions
	w.GapP50US, w.GapP99US = m.GapP50US, m.GapP99US
	w.CPUPerHandoffUS, w.CmdsPerHandoff = Num(math.NaN()), Num(math.NaN())
	if n := float64(m.Acquisitions); n > 0 {
		w.CPUPerHandoffUS = Num(turns.CPU * 1e6 / n)
		w.CmdsPerHandoff = Num(float64(turns.Commands) / n)
		w.CallsPerHandoff = map[string]float64{}
		for k, v := range sumCalls(turns) {
			w.CallsPerHandoff[k] = float64(v) / n
		}
	}
	return w
}

// NamesPoint is one size of the names curve: the state left after Names
// names were each locked and unlocked once.
type NamesPoint struct {
	Names int  `json:"names"`
	Real  bool `json:"real"` // every name went through the client (else: Redis filled, see CurveParams.Real)

	Seconds         float64 `json:"seconds"`            // locking the names of this step
	HeapBytes       Num     `json:"client_heap_bytes"`  // client heap above the baseline (NaN: not measured)
	HeapBytesPerK   Num     `json:"client_heap_per_1k"` // per 1,000 names
	Goroutines      Num     `json:"client_goroutines"`  // goroutines above the baseline
	Keys            int64   `json:"keys"`               // DBSIZE above the baseline
	KeysPerName     Num     `json:"keys_per_name"`
	MemBytes        int64   `json:"redis_mem_bytes"` // INFO used_memory above the baseline
	MemBytesPerName Num     `json:"redis_mem_per_name"`
	KeyTTLSeconds   Num     `json:"key_ttl_seconds"` // PTTL of a key the last real name left
	Error           string  `json:"error,omitempty"`
}

// Fill completes the per-name figures of p.
func (p NamesPoint) Fill() NamesPoint {
	nan := Num(math.NaN())
	p.KeysPerName, p.MemBytesPerName, p.HeapBytesPerK = nan, nan, nan
	if p.Names > 0 {
		p.KeysPerName = Num(float64(p.Keys) / float64(p.Names))
		p.MemBytesPerName = Num(float64(p.MemBytes) / float64(p.Names))
		p.HeapBytesPerK = p.HeapBytes * 1000 / Num(p.Names)
	}
	return p
}

// CommandsResult is the commands curve: one shape on both topologies.
type CommandsResult struct {
	Shape      Params        `json:"shape"`
	Standalone Metrics       `json:"standalone"`
	Cluster    Metrics       `json:"cluster"`
	Rows       []CommandsRow `json:"rows"`
}

// CommandsRow is one Redis command's calls per acquisition.
type CommandsRow struct {
	Command    string  `json:"command"`
	Standalone float64 `json:"standalone"`
	Cluster    float64 `json:"cluster"`
}

// CommandRows lists, for every command either run called, its calls per
// acquisition on each topology (INFO commandstats; commands run inside
// scripts included), the commands the cluster adds most first.
func CommandRows(standalone, cluster Metrics) []CommandsRow {
	per := func(m Metrics, k string) float64 {
		if m.Acquisitions == 0 {
			return math.NaN()
		}
		return float64(m.RedisCalls[k]) / float64(m.Acquisitions)
	}
	seen := map[string]bool{}
	var rows []CommandsRow
	for _, m := range []Metrics{standalone, cluster} {
		for k := range m.RedisCalls {
			if !seen[k] {
				seen[k] = true
				rows = append(rows, CommandsRow{Command: k, Standalone: per(standalone, k), Cluster: per(cluster, k)})
			}
		}
	}
	added := func(r CommandsRow) float64 {
		return nz(r.Cluster) - nz(r.Standalone)
	}
	sort.Slice(rows, func(i, j int) bool {
		if a, b := added(rows[i]), added(rows[j]); a != b {
			return a > b
		}
		return rows[i].Command < rows[j].Command
	})
	return rows
}

func nz(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}
