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
	if len(all) != 2*len(Presets())+2 {
		t.Fatalf("all: %v", names(all))
	}
}
