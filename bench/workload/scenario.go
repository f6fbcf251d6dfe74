// Package workload drives lock libraries with a contention workload, and
// turns the recorded samples into the reported metrics.
package workload

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Params is one contention workload.
type Params struct {
	Instances  int           `json:"instances"`  // client instances (each its own connections)
	Goroutines int           `json:"goroutines"` // goroutines per instance
	Names      int           `json:"names"`      // lock names; goroutine i uses name i % Names
	Hold       time.Duration `json:"hold"`       // time the lock is held (time.Sleep)
	Think      time.Duration `json:"think"`      // pause between release and next attempt
	Duration   time.Duration `json:"duration"`   // measured window
}

// TotalGoroutines is Instances * Goroutines.
func (p Params) TotalGoroutines() int { return p.Instances * p.Goroutines }

// NamesInUse is the number of names some goroutine actually uses.
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
	}
	return nil
}

func (p Params) String() string {
	return fmt.Sprintf("%d instances x %d goroutines, %d name(s), hold %v, think %v, %v",
		p.Instances, p.Goroutines, p.Names, p.Hold, p.Think, p.Duration)
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

// Scenario is a named preset.
type Scenario struct {
	Name    string         `json:"name"`
	About   string         `json:"about"`
	Params  Params         `json:"params"`
	Holding *HoldingParams `json:"holding,omitempty"`
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
		{Name: "uncontended", About: "4 x 8 goroutines, each on its own name (256 names), no hold/think: raw lock+unlock cost",
			Params: Params{Instances: 4, Goroutines: 8, Names: 256, Hold: 0, Think: 0, Duration: d}},
		{Name: "holding", About: "one client holds many locks on distinct names across renewal periods",
			Holding: &HoldingParams{Locks: 10000, PeerLocks: 100, LeaseTTL: 3 * time.Second, Periods: 3}},
	}
}

// Preset finds a preset by name.
func Preset(name string) (Scenario, bool) {
	for _, s := range Presets() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// PresetNames lists preset names.
func PresetNames() []string {
	var out []string
	for _, s := range Presets() {
		out = append(out, s.Name)
	}
	return out
}

// ParseScenarios resolves a comma list of preset names; "all" expands to
// every preset.
func ParseScenarios(list string) ([]Scenario, error) {
	var out []Scenario
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if n == "all" {
			for _, s := range Presets() {
				if !seen[s.Name] {
					seen[s.Name] = true
					out = append(out, s)
				}
			}
			continue
		}
		s, ok := Preset(n)
		if !ok {
			names := PresetNames()
			sort.Strings(names)
			return nil, fmt.Errorf("unknown scenario %q (have: all,%s)", n, strings.Join(names, ","))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario selected")
	}
	return out, nil
}
