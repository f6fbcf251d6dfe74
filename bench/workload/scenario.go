// Package workload drives lock libraries with a contention workload, and
// turns the recorded samples into the reported metrics.
package workload

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/lockers"
)

// Params is one contention workload.
type Params struct {
	Instances  int           `json:"instances"`  // client instances (each its own connections)
	Goroutines int           `json:"goroutines"` // goroutines per instance
	Names      int           `json:"names"`      // lock names; which goroutine uses which: NameMode
	Hold       time.Duration `json:"hold"`       // time the lock is held (time.Sleep)
	Think      time.Duration `json:"think"`      // pause between release and next attempt
	Duration   time.Duration `json:"duration"`   // measured window
	// NameMode is how an acquisition picks its name out of Names (""
	// = NamesShared: goroutine i always uses name i % Names).
	NameMode NameMode `json:"name_mode,omitempty"`
	// Limit, when > 0, makes each name a semaphore of Limit permits (the
	// semaphore libraries run); 0 is a lock.
	Limit int `json:"limit,omitempty"`
}

// NameMode is how the goroutines pick the lock name of each acquisition.
type NameMode string

// Name modes.
const (
	// NamesShared (the default): goroutine i (global index, instance x
	// Goroutines + goroutine) always uses name i % Names, so with fewer
	// names than goroutines several share one.
	NamesShared NameMode = ""
	// NamesPerGoroutine: goroutine i always uses name i, its own; no two
	// goroutines share a name. Names is the number of goroutines
	// (Normalize sets it).
	NamesPerGoroutine NameMode = "per-goroutine"
	// NamesRandom: every acquisition picks a name uniformly at random out
	// of Names, so a goroutine rarely takes the same name twice in a row
	// when Names is large.
	NamesRandom NameMode = "random"
)

// Normalize returns p with the fields its NameMode derives filled in:
// Names = Instances x Goroutines for NamesPerGoroutine (so that every
// goroutine keeps its own name whatever the instance and goroutine
// counts).
func (p Params) Normalize() Params {
	if p.NameMode == NamesPerGoroutine {
		p.Names = p.TotalGoroutines()
	}
	return p
}

// NameIndex is the name a goroutine (global index gi) uses on every
// acquisition, or -1 in NamesRandom mode, where each acquisition picks one.
func (p Params) NameIndex(gi int) int {
	if p.NameMode == NamesRandom {
		return -1
	}
	return gi % p.Names
}

// Capacity is the number of holders a name admits at once: Limit for a
// semaphore, 1 for a lock.
func (p Params) Capacity() int { return max(1, p.Limit) }

// TotalGoroutines is Instances * Goroutines.
func (p Params) TotalGoroutines() int { return p.Instances * p.Goroutines }

// NamesInUse is the number of names some goroutine actually uses (in
// NamesRandom mode: the most names held at once, one per goroutine).
func (p Params) NamesInUse() int {
	if t := p.TotalGoroutines(); t < p.Names {
		return t
	}
	return p.Names
}

// Validate reports nonsensical parameters.
func (p Params) Validate() error {
	switch {
	case p.Instances < 1:
		return fmt.Errorf("instances must be >= 1")
	case p.Goroutines < 1:
		return fmt.Errorf("goroutines must be >= 1")
	case p.Names < 1:
		return fmt.Errorf("names must be >= 1")
	case p.Hold < 0 || p.Think < 0:
		return fmt.Errorf("hold and think must be >= 0")
	case p.Duration <= 0:
		return fmt.Errorf("duration must be > 0")
	case p.Limit < 0:
		return fmt.Errorf("limit must be >= 0")
	case p.NameMode != NamesShared && p.NameMode != NamesPerGoroutine && p.NameMode != NamesRandom:
		return fmt.Errorf("unknown name mode %q", p.NameMode)
	case p.NameMode == NamesPerGoroutine && p.Names != p.TotalGoroutines():
		return fmt.Errorf("names must be instances x goroutines (%d) with one name per goroutine, not %d", p.TotalGoroutines(), p.Names)
	}
	return nil
}

func (p Params) String() string {
	sem := ""
	if p.Limit > 0 {
		sem = fmt.Sprintf(" (semaphores of %d permits)", p.Limit)
	}
	mode := ""
	switch p.NameMode {
	case NamesPerGoroutine:
		mode = ", one per goroutine"
	case NamesRandom:
		mode = ", a random one per acquisition"
	}
	return fmt.Sprintf("%d instances x %d goroutines, %d name(s)%s%s, hold %v, think %v, %v",
		p.Instances, p.Goroutines, p.Names, mode, sem, p.Hold, p.Think, p.Duration)
}

// HoldingParams is the "holding" scenario: one client holds many locks on
// distinct names for a few renewal periods.
type HoldingParams struct {
	Locks     int           `json:"locks"`      // locks held by baton (and any library not listed in PeerLocks)
	PeerLocks int           `json:"peer_locks"` // locks held by rueidislock (it self-triggers an extend storm)
	LeaseTTL  time.Duration `json:"lease_ttl"`  // lease/validity; renewal every LeaseTTL/3
	Periods   int           `json:"periods"`    // renewal periods to hold for
	Hold      time.Duration `json:"hold"`       // if > 0, overrides Periods*LeaseTTL/3 (used by -short)
}

// Renew is the renewal period assumed for the hold (LeaseTTL/3).
func (h HoldingParams) Renew() time.Duration { return h.LeaseTTL / 3 }

// HoldFor is the measured hold window.
func (h HoldingParams) HoldFor() time.Duration {
	if h.Hold > 0 {
		return h.Hold
	}
	return time.Duration(h.Periods) * h.Renew()
}

// LocksFor returns how many locks a library holds in the holding scenario.
func (h HoldingParams) LocksFor(lib string) int {
	if lib == "rueidislock" && h.PeerLocks > 0 {
		return h.PeerLocks
	}
	return h.Locks
}

// Topology is the Redis deployment a scenario runs against.
type Topology string

// Topologies.
const (
	// Standalone is one redis-server (the default).
	Standalone Topology = "standalone"
	// Cluster is a local 3-primary Redis Cluster.
	Cluster Topology = "cluster"
	// Replicated is one redis-server with one replica attached, for
	// baton's MinReplicas.
	Replicated Topology = "replicated"
)

// Scenario is a named preset.
type Scenario struct {
	Name     string         `json:"name"`
	About    string         `json:"about"`
	Topology Topology       `json:"topology,omitempty"` // "" = Standalone
	Params   Params         `json:"params"`
	Holding  *HoldingParams `json:"holding,omitempty"`
	// Failover, when set, makes this the leader-failover measurement of
	// baton's Election (not a contention workload).
	Failover *FailoverParams `json:"failover,omitempty"`
	// Libs, when set, are the libraries this scenario compares (unless
	// -libs is given).
	Libs []string `json:"libs,omitempty"`
	// Procs, when set, runs the instances of a contention scenario as
	// separate OS processes (as -procs does for every scenario).
	Procs bool `json:"procs,omitempty"`
}

// IsSemaphore reports a scenario of semaphores (Params.Limit > 0).
func (s Scenario) IsSemaphore() bool {
	return s.Holding == nil && s.Failover == nil && s.Params.Limit > 0
}

// IsContention reports a contention workload (Params), not holding or failover.
func (s Scenario) IsContention() bool { return s.Holding == nil && s.Failover == nil }

// On returns the scenario's topology (Standalone when unset).
func (s Scenario) On() Topology {
	if s.Topology == "" {
		return Standalone
	}
	return s.Topology
}

// Base is the name of the standalone preset the scenario derives from.
func (s Scenario) Base() string {
	for _, p := range []string{"cluster-", "minreplicas-"} {
		if b, ok := strings.CutPrefix(s.Name, p); ok {
			return b
		}
	}
	return s.Name
}

// OnCluster returns the cluster variant of a standalone preset.
func (s Scenario) OnCluster() Scenario {
	s.Name = "cluster-" + s.Base()
	s.Topology = Cluster
	if s.IsContention() && !s.IsSemaphore() {
		s.Libs = nil
	}
	return s
}

// WithReplica returns the MinReplicas variant of a standalone contention
// preset: a replica attached, baton next to baton+MinReplicas1.
func (s Scenario) WithReplica() Scenario {
	s.Name = "minreplicas-" + s.Base()
	s.Topology = Replicated
	s.Libs = []string{"baton", lockers.BatonMinReplicas}
	return s
}

// Standard durations.
const (
	StandardDuration = 5 * time.Second
	ShortDuration    = time.Second
)

// Presets returns the named scenarios in run order.
func Presets() []Scenario {
	d := StandardDuration
	ms := time.Millisecond
	return []Scenario{
		{Name: "standard", About: "4 replicas x 8 goroutines contend for one lock",
			Params: Params{Instances: 4, Goroutines: 8, Names: 1, Hold: ms, Think: ms, Duration: d}},
		{Name: "many-instances", About: "8 replicas, one goroutine each, one lock",
			Params: Params{Instances: 8, Goroutines: 1, Names: 1, Hold: ms, Think: ms, Duration: d}},
		{Name: "several-names", About: "4 x 8 goroutines over 4 lock names",
			Params: Params{Instances: 4, Goroutines: 8, Names: 4, Hold: ms, Think: ms, Duration: d}},
		{Name: "long-hold", About: "4 x 4 goroutines, 10ms critical section",
			Params: Params{Instances: 4, Goroutines: 4, Names: 1, Hold: 10 * ms, Think: ms, Duration: d}},
		{Name: "no-think", About: "4 x 8 goroutines re-request immediately",
			Params: Params{Instances: 4, Goroutines: 8, Names: 1, Hold: ms, Think: 0, Duration: d}},
		{Name: "uncontended", About: "4 x 8 goroutines, each re-locking its own name (also runnable as \"repeat\"), no hold/think: raw lock+unlock cost",
			Params: Params{Instances: 4, Goroutines: 8, Names: 32, NameMode: NamesPerGoroutine, Hold: 0, Think: 0, Duration: d}},
		{Name: "random-names", About: "4 x 8 goroutines, each acquisition on a uniformly random name of 4,096, no hold/think: names seldom re-locked by the same client",
			Params: Params{Instances: 4, Goroutines: 8, Names: 4096, NameMode: NamesRandom, Hold: 0, Think: 0, Duration: d}},
		{Name: "alternating", About: "2 instances as OS processes, one goroutine each, take turns on one lock (hold 1ms, think 5ms)",
			Params: Params{Instances: 2, Goroutines: 1, Names: 1, Hold: ms, Think: 5 * ms, Duration: d}, Procs: true},
		{Name: "cross-8x2", About: "8 instances x 2 goroutines over 2 names, each instance with one goroutine on each name, 2ms hold, no think",
			Params: Params{Instances: 8, Goroutines: 2, Names: 2, Hold: 2 * ms, Think: 0, Duration: d}},
		{Name: "procs-16", About: "16 instances as OS processes, one goroutine each, one lock, 5ms hold, no think",
			Params: Params{Instances: 16, Goroutines: 1, Names: 1, Hold: 5 * ms, Think: 0, Duration: d}, Procs: true},
		{Name: "semaphore", About: "8 replicas x 4 goroutines share one semaphore of 4 permits",
			Params: Params{Instances: 8, Goroutines: 4, Names: 1, Limit: 4, Hold: ms, Think: ms, Duration: d},
			Libs:   lockers.SemaphoreNames()},
		{Name: "holding", About: "one client holds many locks on distinct names across renewal periods",
			Holding: &HoldingParams{Locks: 10000, PeerLocks: 100, LeaseTTL: 3 * time.Second, Periods: 3}},
	}
}

// Aliases are other names of presets: "repeat" (each goroutine re-locks its
// own name, the name the lock-caching runs use) is "uncontended".
var Aliases = map[string]string{"repeat": "uncontended"}

// DefaultFailover is the failover scenario's setup.
var DefaultFailover = FailoverParams{Candidates: 3, Observers: 4, Rounds: 20, Lease: time.Second, Settle: 100 * time.Millisecond}

// OptionalPresets are the named scenarios that no set but "all" runs:
// failover (a minute or so, processes killed on purpose).
func OptionalPresets() []Scenario {
	f := DefaultFailover
	return []Scenario{
		{Name: "failover", About: "leader failover of baton's Election: Unlock and SIGKILL of the leader's process, candidates as processes",
			Failover: &f, Libs: []string{"baton"}},
	}
}

// minReplicaPresets are the presets the "minreplicas" set compares.
var minReplicaPresets = []string{"standard", "uncontended"}

// Preset finds a preset by name: a standalone preset ("long-hold", also
// spelled "standalone-long-hold"), its cluster variant ("cluster-long-hold")
// or its MinReplicas variant ("minreplicas-uncontended"; contention presets
// only). An alias (see Aliases) finds the preset under its own name.
func Preset(name string) (Scenario, bool) {
	base, derive := name, func(s Scenario) Scenario { return s }
	switch {
	case strings.HasPrefix(name, "standalone-"):
		base = strings.TrimPrefix(name, "standalone-")
	case strings.HasPrefix(name, "cluster-"):
		base, derive = strings.TrimPrefix(name, "cluster-"), Scenario.OnCluster
	case strings.HasPrefix(name, "minreplicas-"):
		base, derive = strings.TrimPrefix(name, "minreplicas-"), Scenario.WithReplica
	}
	if a, ok := Aliases[base]; ok {
		base = a
	}
	for _, s := range append(Presets(), OptionalPresets()...) {
		if s.Name == base {
			if (!s.IsContention() || s.IsSemaphore()) && strings.HasPrefix(name, "minreplicas-") {
				return Scenario{}, false // MinReplicas compares lock contention only
			}
			return derive(s), true
		}
	}
	return Scenario{}, false
}

// PresetNames lists the standalone preset names.
func PresetNames() []string {
	var out []string
	for _, s := range append(Presets(), OptionalPresets()...) {
		out = append(out, s.Name)
	}
	return out
}

// AliasList describes Aliases as "alias=preset,...", sorted.
func AliasList() string {
	var out []string
	for a, p := range Aliases {
		out = append(out, a+"="+p)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Sets are the names ParseScenarios expands to several scenarios.
var Sets = map[string]string{
	"standard":    "every standalone preset, holding included (what make bench runs)",
	"cluster":     "every preset on a local 3-primary Redis Cluster, holding included",
	"minreplicas": "baton vs baton+MinReplicas1 on standard and uncontended, one replica attached",
	"all":         "standard + cluster + minreplicas + failover",
}

// SetMembers expands a set name (see Sets).
func SetMembers(set string) ([]Scenario, bool) {
	var out []Scenario
	switch set {
	case "standard", "standalone":
		out = Presets()
	case "cluster":
		for _, s := range Presets() {
			out = append(out, s.OnCluster())
		}
	case "minreplicas":
		for _, n := range minReplicaPresets {
			s, _ := Preset(n)
			out = append(out, s.WithReplica())
		}
	case "all":
		for _, n := range []string{"standard", "cluster", "minreplicas"} {
			m, _ := SetMembers(n)
			out = append(out, m...)
		}
		out = append(out, OptionalPresets()...)
	default:
		return nil, false
	}
	return out, true
}

// ParseScenarios resolves a comma list of set names (see Sets; note that
// "standard" is the set, the single preset is "standalone-standard") and
// preset names.
func ParseScenarios(list string) ([]Scenario, error) {
	var out []Scenario
	seen := map[string]bool{}
	add := func(s Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if m, ok := SetMembers(n); ok {
			for _, s := range m {
				add(s)
			}
			continue
		}
		s, ok := Preset(n)
		if !ok {
			names := PresetNames()
			sort.Strings(names)
			return nil, fmt.Errorf("unknown scenario %q (sets: all,standard,cluster,minreplicas; presets: %s, also as standalone-NAME, cluster-NAME, minreplicas-NAME; aliases: %s)",
				n, strings.Join(names, ","), AliasList())
		}
		add(s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario selected")
	}
	return out, nil
}
