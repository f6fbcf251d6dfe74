package lockers_test

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/workload"
)

// startRedis starts a throwaway redis-server for the test (skipping it
// when there is none on PATH) and an admin client on it.
func startRedis(t *testing.T) *redisx.Admin {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH")
	}
	srv, err := redisx.Start(context.Background(), "redis-server")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	admin, err := redisx.NewAdmin(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return admin
}

// runLib runs p with lib's instances on an emptied server (a library's
// leftovers must not meet the next one's keys).
func runLib(t *testing.T, admin *redisx.Admin, lib string, p workload.Params) workload.Metrics {
	t.Helper()
	ctx := context.Background()
	if err := admin.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	ad, err := lockers.Get(lib, lockers.Config{Limit: p.Limit})
	if err != nil {
		t.Fatal(err)
	}
	var insts []lockers.Locker
	for range p.Instances {
		l, err := ad.New(lockers.Standalone(admin.Addrs()[0]))
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, l)
	}
	start := time.Now()
	res := workload.Run(ctx, insts, 0, p, workload.MonotonicClock(start), start, make([]atomic.Int32, p.Names))
	for _, l := range insts {
		l.Close()
	}
	return workload.Compute(lib, "t", p, res, redisx.Delta{})
}

// TestSemaphores runs every semaphore library briefly against a throwaway
// redis-server: they must let holders in, never more than the limit.
func TestSemaphores(t *testing.T) {
	srv := startRedis(t)
	p := workload.Params{Instances: 2, Goroutines: 4, Names: 1, Limit: 3, Hold: time.Millisecond, Think: time.Millisecond, Duration: 700 * time.Millisecond}
	for _, lib := range lockers.SemaphoreNames() {
		t.Run(lib, func(t *testing.T) {
			m := runLib(t, srv, lib, p)
			if m.Problems() || m.Acquisitions < 20 || m.MaxHolders > int64(p.Limit) || m.MaxHolders < 2 {
				t.Fatalf("acq %d max holders %d over limit %d fencing %d errors %v %v hung %v",
					m.Acquisitions, m.MaxHolders, m.Overlaps, m.FencingViolations, m.LockErrors, m.UnlockErrors, m.Hung)
			}
			t.Logf("%s: %d acquisitions, max holders %d, util %.2f", lib, m.Acquisitions, m.MaxHolders, float64(m.Util))
		})
	}
	if _, err := lockers.Get("counter", lockers.Config{}); err == nil {
		t.Fatal("counter is not a lock library")
	}
}

// TestReadWriteAndTwoNamesPeers runs the peers of the read-write and
// two-names shapes briefly: readers share, writers are alone, two names
// are taken together or not at all.
func TestReadWriteAndTwoNamesPeers(t *testing.T) {
	srv := startRedis(t)
	rw := workload.Params{Instances: 2, Goroutines: 4, Names: 1, ReadPercent: 80, Hold: time.Millisecond, Think: time.Millisecond, Duration: 700 * time.Millisecond}
	two := workload.Params{Instances: 2, Goroutines: 4, Names: 6, NameMode: workload.NamesRandom, NamesPerOp: 2, Hold: time.Millisecond, Duration: 700 * time.Millisecond}
	for _, c := range []struct {
		lib string
		p   workload.Params
	}{{"polling-rw-1ms", rw}, {lockers.BatonMutex, rw}, {"polling-1ms", two}, {lockers.BatonNested, two}} {
		t.Run(c.lib, func(t *testing.T) {
			if err := lockers.Supports(c.lib, c.p.Needs()); err != nil {
				t.Fatal(err)
			}
			m := runLib(t, srv, c.lib, c.p)
			if m.Problems() || m.Acquisitions < 20 {
				t.Fatalf("acq %d overlaps %d fencing %d errors %v %v hung %v", m.Acquisitions, m.Overlaps, m.FencingViolations, m.LockErrors, m.UnlockErrors, m.Hung)
			}
			if c.lib == "polling-rw-1ms" && m.MaxHolders < 2 {
				t.Errorf("readers never shared: max holders %d", m.MaxHolders)
			}
			t.Logf("%s: %d acquisitions, max holders %d, util %.2f", c.lib, m.Acquisitions, m.MaxHolders, float64(m.Util))
		})
	}
	if lockers.Supports("redsync", lockers.FeatureRW) == nil || lockers.Supports("polling-rw-1ms", lockers.FeatureMulti) == nil {
		t.Fatal("a feature claimed by a library without it")
	}
}
