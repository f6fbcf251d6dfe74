package main

import (
	"slices"
	"testing"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// TestBatonNoCacheByDefault: baton-nocache runs right after baton in every
// lock contention scenario, and only there.
func TestBatonNoCacheByDefault(t *testing.T) {
	all, err := resolveLibs("all")
	if err != nil {
		t.Fatal(err)
	}
	o := &options{set: map[string]bool{}}
	scens, _ := workload.SetMembers("all")
	for _, sc := range scens {
		got := libsFor(o, sc, all)
		i := slices.Index(got, lockers.BatonNoCache)
		switch {
		case sc.IsContention() && !sc.IsSemaphore() && sc.On() != workload.Replicated:
			if i != 1 || got[0] != "baton" {
				t.Errorf("%s: %v", sc.Name, got)
			}
		case i >= 0:
			t.Errorf("%s runs %s: %v", sc.Name, lockers.BatonNoCache, got)
		}
	}
	o.set["libs"] = true
	one, _ := resolveLibs("redsync,baton")
	if sc, _ := workload.Preset("procs-16"); !slices.Equal(libsFor(o, sc, one), []string{"redsync", "baton"}) {
		t.Errorf("-libs redsync,baton: %v", libsFor(o, sc, one))
	}
}

// TestWorkloadFlagsKeepNameModes: -instances/-goroutines keep one name per
// goroutine; -names replaces it by i % names; random stays random.
func TestWorkloadFlagsKeepNameModes(t *testing.T) {
	un, _ := workload.Preset("repeat")
	o := &options{set: map[string]bool{"instances": true, "goroutines": true}, instances: 2, goroutines: 3}
	p := un.Params
	applyWorkloadFlags(o, &p)
	if p.Names != 6 || p.NameMode != workload.NamesPerGoroutine || p.Validate() != nil {
		t.Fatalf("uncontended with 2 x 3: %+v", p)
	}
	o = &options{set: map[string]bool{"names": true, "short": true}, names: 4, short: true}
	p = un.Params
	applyWorkloadFlags(o, &p)
	if p.Names != 4 || p.NameMode != workload.NamesShared || p.Duration != workload.ShortDuration || p.Validate() != nil {
		t.Fatalf("uncontended with -names 4: %+v", p)
	}
	rn, _ := workload.Preset("random-names")
	p = rn.Params
	applyWorkloadFlags(o, &p)
	if p.Names != 4 || p.NameMode != workload.NamesRandom {
		t.Fatalf("random-names with -names 4: %+v", p)
	}
}
