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

// TestSemaphores runs every semaphore library briefly against a throwaway
// redis-server: they must let holders in, never more than the limit.
func TestSemaphores(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH")
	}
	ctx := context.Background()
	srv, err := redisx.Start(ctx, "redis-server")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	p := workload.Params{Instances: 2, Goroutines: 4, Names: 1, Limit: 3, Hold: time.Millisecond, Think: time.Millisecond, Duration: 700 * time.Millisecond}
	for _, lib := range lockers.SemaphoreNames() {
		t.Run(lib, func(t *testing.T) {
			ad, err := lockers.Get(lib, lockers.Config{Limit: p.Limit})
			if err != nil {
				t.Fatal(err)
			}
			var insts []lockers.Locker
			for range p.Instances {
				l, err := ad.New(lockers.Standalone(srv.Addr))
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
			m := workload.Compute(lib, "t", p, res, redisx.Delta{})
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
