package workload

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func names(s []Scenario) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Name)
	}
	return out
}

func TestParseScenarioSets(t *testing.T) {
	std, err := ParseScenarios("standard")
	if err != nil || len(std) != len(Presets()) || std[len(std)-1].Holding == nil {
		t.Fatalf("standard: %v %v", names(std), err)
	}
	cl, _ := ParseScenarios("cluster")
	for _, s := range cl {
		if s.On() != Cluster || s.Name != "cluster-"+s.Base() {
			t.Fatalf("cluster: %v", names(cl))
		}
	}
	mr, _ := ParseScenarios("minreplicas")
	if len(mr) != 2 || mr[0].Name != "minreplicas-standard" || mr[1].Name != "minreplicas-uncontended" || mr[0].On() != Replicated || len(mr[0].Libs) != 2 {
		t.Fatalf("minreplicas: %v", names(mr))
	}
	one, _ := ParseScenarios("standalone-standard,long-hold,cluster-holding")
	if got := names(one); len(got) != 3 || got[0] != "standard" || got[1] != "long-hold" || got[2] != "cluster-holding" {
		t.Fatalf("presets: %v", got)
	}
	if _, err := ParseScenarios("minreplicas-holding"); err == nil {
		t.Fatal("minreplicas-holding accepted")
	}
	all, _ := ParseScenarios("all")
	if len(all) != 2*len(Presets())+2+len(OptionalPresets()) || all[len(all)-1].Failover == nil {
		t.Fatalf("all: %v", names(all))
	}
}

func TestSemaphoreScenario(t *testing.T) {
	s, ok := Preset("semaphore")
	if !ok || !s.IsSemaphore() || s.Params.Limit != 4 || s.Params.Instances != 8 || s.Params.Goroutines != 4 || len(s.Libs) == 0 {
		t.Fatalf("semaphore preset: %+v", s)
	}
	std, _ := ParseScenarios("standard")
	found := false
	for _, x := range std {
		found = found || x.Name == "semaphore"
	}
	if !found {
		t.Fatalf("standard set lacks semaphore: %v", names(std))
	}
	cl, ok := Preset("cluster-semaphore")
	if !ok || cl.On() != Cluster || len(cl.Libs) == 0 {
		t.Fatalf("cluster-semaphore: %+v", cl)
	}
	if _, ok := Preset("minreplicas-semaphore"); ok {
		t.Fatal("minreplicas-semaphore accepted")
	}
	f, ok := Preset("failover")
	if !ok || f.Failover == nil || f.IsContention() || f.IsSemaphore() {
		t.Fatalf("failover: %+v", f)
	}
	for _, x := range std {
		if x.Failover != nil {
			t.Fatal("failover in the standard set")
		}
	}
	if _, ok := Preset("minreplicas-failover"); ok {
		t.Fatal("minreplicas-failover accepted")
	}
	lock, _ := Preset("standard")
	if lock.IsSemaphore() || lock.Params.Capacity() != 1 || s.Params.Capacity() != 4 {
		t.Fatal("capacity")
	}
}

// TestContentionPresets: the contention shapes (repeat, random-names,
// alternating, cross-8x2, procs-16) run by name, in the standard set, with
// the parameters that the figures in bench/README.md were measured with.
func TestContentionPresets(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		want  Params
		procs bool
	}{
		{"repeat", Params{Instances: 4, Goroutines: 8, Names: 32, NameMode: NamesPerGoroutine}, false},
		{"random-names", Params{Instances: 4, Goroutines: 8, Names: 4096, NameMode: NamesRandom}, false},
		{"alternating", Params{Instances: 2, Goroutines: 1, Names: 1, Hold: ms, Think: 5 * ms}, true},
		{"cross-8x2", Params{Instances: 8, Goroutines: 2, Names: 2, Hold: 2 * ms}, false},
		{"procs-16", Params{Instances: 16, Goroutines: 1, Names: 1, Hold: 5 * ms}, true},
	} {
		s, ok := Preset(c.name)
		if !ok {
			t.Fatalf("%s: no such preset", c.name)
		}
		c.want.Duration = StandardDuration
		if s.Params != c.want || s.Procs != c.procs || s.About == "" || !s.IsContention() || s.IsSemaphore() {
			t.Errorf("%s: %+v procs %v, want %+v procs %v", c.name, s.Params, s.Procs, c.want, c.procs)
		}
		if err := s.Params.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		std, _ := ParseScenarios("standard")
		if !slices.Contains(names(std), s.Name) {
			t.Errorf("%s (%s) not in the standard set %v", c.name, s.Name, names(std))
		}
		if cl, ok := Preset("cluster-" + c.name); !ok || cl.On() != Cluster || cl.Procs != c.procs || cl.Params != s.Params {
			t.Errorf("cluster-%s: %+v", c.name, cl)
		}
	}
	// "repeat" is "uncontended": one scenario, run once, under that name.
	got, err := ParseScenarios("repeat,uncontended,standalone-repeat")
	if err != nil || len(got) != 1 || got[0].Name != "uncontended" {
		t.Fatalf("repeat: %v %v", names(got), err)
	}
	if mr, ok := Preset("minreplicas-repeat"); !ok || mr.Name != "minreplicas-uncontended" {
		t.Fatalf("minreplicas-repeat: %+v", mr)
	}
	if _, err := ParseScenarios("nonesuch"); err == nil || !strings.Contains(err.Error(), "repeat=uncontended") {
		t.Fatalf("unknown scenario error: %v", err)
	}
	if s := (Params{Instances: 1, Goroutines: 1, Names: 1, NameMode: "bogus", Duration: 1}); s.Validate() == nil {
		t.Fatal("unknown name mode accepted")
	}
}
