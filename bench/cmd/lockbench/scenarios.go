package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// libsFor returns the libraries a scenario compares: the scenario's own
// list unless -libs names libraries ("all" stands for each scenario's own
// list, and for the canonical list where it has none; extras named beside
// it are added); on the replicated topology baton+MinReplicas1 is added
// after baton; a smoke run (-short) keeps the ends of each polling sweep
// unless -libs was given; libraries that do not apply are left out.
func libsFor(o *options, sc workload.Scenario, libs []string) []string {
	base := libs
	named := o.set["libs"]
	if len(sc.Libs) > 0 && (!named || slices.Contains(strings.Split(o.libs, ","), "all")) {
		base = slices.Clone(sc.Libs)
		for _, l := range libs {
			if lockers.IsExtra(l) && !slices.Contains(base, l) {
				base = append(base, l)
			}
		}
	}
	if sc.On() == workload.Replicated && !slices.Contains(base, lockers.BatonMinReplicas) {
		var with []string
		for _, l := range base {
			with = append(with, l)
			if l == "baton" {
				with = append(with, lockers.BatonMinReplicas)
			}
		}
		base = with
	}
	var out []string
	for _, l := range base {
		if applies(o, sc, l, named) {
			out = append(out, l)
		}
	}
	return out
}

// applies reports whether library l takes part in scenario sc. baton
// always takes part in a contention scenario it has a lock for (without
// the feature the scenario needs, runScenario leaves it out and says so).
func applies(o *options, sc workload.Scenario, l string, named bool) bool {
	if d, ok := lockers.SweepInterval(l); ok && o.short && !named && !slices.Contains(lockers.ShortSweep, d) {
		return false // a smoke run keeps the ends of the sweep
	}
	switch {
	case sc.IsSemaphore():
		return lockers.HasSemaphore(l)
	case sc.Curve != nil || sc.Failover != nil:
		return l == "baton" // baton's curves; the election is baton's
	case sc.Holding != nil:
		return l == "baton" || l == "rueidislock" // libraries that renew leases in the background
	case !lockers.HasLock(l):
		return false // a semaphore library only
	case sc.On() == workload.Cluster && !lockers.SupportsCluster(l):
		return false
	case sc.On() != workload.Replicated && lockers.NeedsReplica(l):
		return false
	case l != "baton" && lockers.Supports(l, sc.Params.Needs()) != nil:
		return false
	}
	return true
}

func resolveLibs(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(list, ",") {
		l = strings.TrimSpace(l)
		switch {
		case l == "":
		case l == "all":
			for _, n := range append(lockers.Names(), lockers.SemaphoreNames()...) {
				if !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
		default:
			if !lockers.HasLock(l) && !lockers.HasSemaphore(l) {
				return nil, fmt.Errorf("unknown library %q (locks: %s; semaphores: %s)", l,
					strings.Join(append(lockers.Names(), lockers.ExtraNames()...), ","), strings.Join(lockers.SemaphoreNames(), ","))
			}
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no library selected")
	}
	return out, nil
}

var knobFlags = []string{"instances", "goroutines", "names", "limit", "hold", "think", "duration"}

// resolveScenarios turns -scenarios (or its defaults), -cluster/-replica
// and the workload flags into the list of scenarios to run.
func resolveScenarios(o *options) ([]workload.Scenario, error) {
	if o.cluster && o.replica {
		return nil, errors.New("-cluster and -replica do not combine (the benchmark's cluster has no replicas)")
	}
	scens, err := selectedScenarios(o)
	if err != nil {
		return nil, err
	}
	scens = moveTopology(o, scens)
	for i := range scens {
		s := &scens[i]
		switch {
		case s.Failover != nil:
			s.Failover = failoverFlags(o, *s.Failover)
		case s.Curve != nil:
			s.Curve = curveFlags(o, *s.Curve)
		case s.Holding != nil:
			s.Holding = holdingFlags(o, *s.Holding)
		default:
			applyWorkloadFlags(o, &s.Params)
			if err := s.Params.Validate(); err != nil {
				return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
			}
		}
	}
	return scens, nil
}

// selectedScenarios picks the scenarios before any flag adjusts them: the
// -scenarios list if given; with workload flags only, one "custom" scenario
// so that the flags describe it alone; otherwise the set -cluster or
// -replica stands for, or the standard set.
func selectedScenarios(o *options) ([]workload.Scenario, error) {
	knobsSet := false
	for _, k := range knobFlags {
		knobsSet = knobsSet || o.set[k]
	}
	switch {
	case o.scenarios != "":
		return workload.ParseScenarios(o.scenarios)
	case knobsSet:
		std, _ := workload.Preset("standard")
		std.Name, std.About = "custom", "custom workload"
		if o.set["limit"] {
			std.Params.Limit = o.limit
		}
		return []workload.Scenario{std}, nil
	case o.cluster:
		scens, _ := workload.SetMembers("cluster")
		return scens, nil
	case o.replica:
		scens, _ := workload.SetMembers("minreplicas")
		return scens, nil
	default:
		scens, _ := workload.SetMembers("standard")
		return scens, nil
	}
}

// moveTopology applies -cluster / -replica: they move the standalone
// scenarios selected (-replica only the lock contention ones, the ones
// MinReplicas changes) onto their deployment. A scenario named twice after
// the move runs once.
func moveTopology(o *options, scens []workload.Scenario) []workload.Scenario {
	seen := map[string]bool{}
	var out []workload.Scenario
	for _, s := range scens {
		switch {
		case s.Curve != nil:
			// A curve chooses its own deployments.
		case o.cluster && s.On() == workload.Standalone:
			s = s.OnCluster()
		case o.replica && s.On() == workload.Standalone && s.IsContention() && !s.IsSemaphore():
			s = s.WithReplica()
		}
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	return out
}

// failoverFlags returns the failover parameters with the flags that apply
// to them, as a new value: copies of a Scenario (OnCluster, WithReplica)
// share the pointer, so changing it in place could reach another scenario.
func failoverFlags(o *options, f workload.FailoverParams) *workload.FailoverParams {
	if o.set["ttl"] {
		f.Lease = o.ttl
	}
	if o.set["rounds"] {
		f.Rounds = o.rounds
	}
	if o.short {
		f.Rounds = min(f.Rounds, 3)
	}
	return &f
}

// curveFlags returns the curve's parameters with the flags that apply to
// them (-sizes, -real-names, -duration for the commands curve's shape;
// -short: small sizes and short windows), as a new value.
func curveFlags(o *options, c workload.CurveParams) *workload.CurveParams {
	c.Sizes = slices.Clone(c.Sizes)
	if o.short {
		shortCurve(&c)
	}
	if o.set["sizes"] && c.Kind != workload.CurveCommands {
		c.Sizes = slices.Clone(o.sizes)
	}
	if o.set["real-names"] {
		c.Real = o.realNames
	}
	if c.Kind == workload.CurveCommands {
		applyWorkloadFlags(o, &c.Shape)
	}
	return &c
}

// shortCurve cuts a curve to a smoke run's: sizes that take every code
// path (the names curve still fills Redis above its real names), windows
// of a fraction of a second.
func shortCurve(c *workload.CurveParams) {
	ms := time.Millisecond
	switch c.Kind {
	case workload.CurveWaiters:
		c.Sizes = []int{8, 40}
		c.Idle, c.Wait, c.Handoff = 300*ms, 500*ms, 500*ms
	case workload.CurveNames:
		c.Sizes, c.Real = []int{1000, 5000}, 1000
	case workload.CurveHeld:
		c.Sizes = []int{100, 1000}
		c.Holding.Hold = workload.ShortDuration
	}
}

// holdingFlags returns the holding parameters with the flags that apply
// to them, as a new value for the same reason as failoverFlags.
func holdingFlags(o *options, h workload.HoldingParams) *workload.HoldingParams {
	h.Locks, h.PeerLocks = o.holdLocks, o.peerLocks
	if o.short {
		h.Hold = workload.ShortDuration
	}
	return &h
}

// applyWorkloadFlags overrides a contention scenario's parameters with the
// workload flags given explicitly, so that a preset keeps its own shape
// except where the command line says otherwise.
func applyWorkloadFlags(o *options, p *workload.Params) {
	if o.set["instances"] {
		p.Instances = o.instances
	}
	if o.set["goroutines"] {
		p.Goroutines = o.goroutines
	}
	if o.set["names"] {
		// The names given replace one name per goroutine (goroutine i:
		// name i % names); a random pick stays random, out of these.
		p.Names = o.names
		if p.NameMode == workload.NamesPerGoroutine {
			p.NameMode = workload.NamesShared
		}
	}
	if o.set["limit"] && p.Limit > 0 {
		p.Limit = o.limit
	}
	if o.set["hold"] {
		p.Hold = o.hold
	}
	if o.set["think"] {
		p.Think = o.think
	}
	if o.set["duration"] {
		p.Duration = o.duration
	}
	if o.short {
		p.Duration = workload.ShortDuration
	}
	*p = p.Normalize() // one name per goroutine for as many goroutines as there are now
}
