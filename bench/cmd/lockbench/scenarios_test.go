package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// TestLibrariesOfEachScenario: every lock shape runs baton and each peer
// configuration (the polling lock at every interval of the sweep), the
// semaphore the counter at every interval, the read-write and two-names
// shapes their own lists, the curves baton alone; baton-nocache only when
// named.
func TestLibrariesOfEachScenario(t *testing.T) {
	all, err := resolveLibs("all")
	if err != nil {
		t.Fatal(err)
	}
	o := &options{libs: "all", set: map[string]bool{}}
	lockLibs := append([]string{"baton", "rueidislock", "redsync", "bsm"}, lockers.SweepNames("polling")...)
	scens, _ := workload.SetMembers("all")
	for _, sc := range scens {
		got := libsFor(o, sc, all)
		var want []string
		switch {
		case sc.Curve != nil || sc.Failover != nil:
			want = []string{"baton"}
		case sc.Holding != nil:
			want = []string{"baton", "rueidislock"}
		case sc.On() == workload.Replicated:
			want = []string{"baton", lockers.BatonMinReplicas}
		case sc.IsSemaphore():
			want = append([]string{"baton"}, lockers.SweepNames("counter")...)
		case sc.Base() == "read-heavy":
			want = append([]string{"baton", lockers.BatonMutex}, lockers.SweepNames("polling-rw")...)
		case sc.Base() == "transfer":
			want = append([]string{"baton", lockers.BatonNested}, lockers.SweepNames("polling")...)
		default:
			want = lockLibs
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", sc.Name, got, want)
		}
	}
	std, _ := workload.Preset("standard")
	o.short = true
	if got := libsFor(o, std, all); !slices.Equal(got, []string{"baton", "rueidislock", "redsync", "bsm", "polling-1ms", "polling-50ms"}) {
		t.Errorf("-short keeps the ends of the sweep: %v", got)
	}
	o.short = false
	o.libs, o.set["libs"] = "all,baton-nocache", true
	with, _ := resolveLibs(o.libs)
	if got := libsFor(o, std, with); !slices.Equal(got, append(slices.Clone(lockLibs), lockers.BatonNoCache)) {
		t.Errorf("-libs all,baton-nocache: %v", got)
	}
	o.libs = "redsync,baton"
	one, _ := resolveLibs(o.libs)
	if sc, _ := workload.Preset("procs-16"); !slices.Equal(libsFor(o, sc, one), []string{"redsync", "baton"}) {
		t.Errorf("-libs redsync,baton: %v", libsFor(o, sc, one))
	}
	o.libs = "polling-5ms,polling-rw-5ms,baton"
	some, _ := resolveLibs(o.libs)
	if sc, _ := workload.Preset("read-heavy"); !slices.Equal(libsFor(o, sc, some), []string{"polling-rw-5ms", "baton"}) {
		t.Errorf("read-heavy runs the libraries with a read-write lock: %v", libsFor(o, sc, some))
	}
}

// TestBatonWithoutTheFeatureIsLeftOutAndSaidSo: until baton has a
// read-write lock, read-heavy is skipped with a note, or in a smoke run
// runs its peers alone; a shape baton can run is untouched.
func TestBatonWithoutTheFeatureIsLeftOutAndSaidSo(t *testing.T) {
	rh, _ := workload.Preset("read-heavy")
	libs := []string{"baton", lockers.BatonMutex, "polling-rw-1ms"}
	o := &options{set: map[string]bool{}}
	if lockers.Supports("baton", lockers.FeatureRW) == nil {
		t.Skip("this baton has a read-write lock")
	}
	got, note, skip := withoutBaton(o, rh, libs)
	if !skip || got != nil || !strings.Contains(note, "RWMutex") || !strings.Contains(note, "skipped") {
		t.Errorf("full run: %v %q %v", got, note, skip)
	}
	o.short = true
	got, note, skip = withoutBaton(o, rh, libs)
	if skip || !slices.Equal(got, libs[1:]) || !strings.Contains(note, "peers only") {
		t.Errorf("smoke run: %v %q %v", got, note, skip)
	}
	std, _ := workload.Preset("standard")
	if got, note, skip := withoutBaton(o, std, libs); skip || note != "" || !slices.Equal(got, libs) {
		t.Errorf("standard: %v %q %v", got, note, skip)
	}
}

// TestShortCurves: a smoke run cuts every curve to small sizes and short
// windows, and -sizes replaces the sizes.
func TestShortCurves(t *testing.T) {
	o := &options{short: true, set: map[string]bool{}}
	for _, sc := range workload.CurvePresets() {
		c := curveFlags(o, *sc.Curve)
		switch c.Kind {
		case workload.CurveWaiters:
			if c.Sizes[len(c.Sizes)-1] > 100 || c.Wait > time.Second || c.Handoff > time.Second {
				t.Errorf("waiters: %+v", c)
			}
		case workload.CurveNames:
			if c.Sizes[len(c.Sizes)-1] <= c.Real {
				t.Errorf("names: the smoke run must fill Redis too: %+v", c)
			}
		case workload.CurveHeld:
			if c.Sizes[len(c.Sizes)-1] > 1000 || c.Holding.HoldFor() > time.Second {
				t.Errorf("held: %+v", c)
			}
		case workload.CurveCommands:
			if c.Shape.Duration != workload.ShortDuration {
				t.Errorf("commands: %+v", c.Shape)
			}
		}
		if sc.Curve.Sizes != nil && &sc.Curve.Sizes[0] == &c.Sizes[0] {
			t.Errorf("%s: sizes shared with the preset", sc.Name)
		}
	}
	o = &options{set: map[string]bool{"sizes": true}, sizes: []int{7}}
	w, _ := workload.Preset("curve-waiters")
	if c := curveFlags(o, *w.Curve); !slices.Equal(c.Sizes, []int{7}) {
		t.Errorf("-sizes: %v", c.Sizes)
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
