package workload

import "testing"

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
