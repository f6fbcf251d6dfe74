package workload

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
)

// HoldingMetrics is the report of the holding scenario for one library.
type HoldingMetrics struct {
	Library  string `json:"library"`
	Locks    int    `json:"locks"`
	Acquired int    `json:"acquired"`

	AcquireSeconds    float64 `json:"acquire_seconds"`
	GoroutinesPerLock Num     `json:"goroutines_per_lock"`
	HeapBytesPerLock  Num     `json:"heap_bytes_per_lock"`

	HoldSeconds  float64 `json:"hold_seconds"`
	CmdsPerSec   Num     `json:"redis_cmds_per_sec"`
	CPUPerSec    Num     `json:"redis_cpu_per_sec"` // CPU seconds per second (1 = one core)
	CmdsPerLockS Num     `json:"redis_cmds_per_lock_per_sec"`
	KeysBefore   int64   `json:"keys_before_hold"`
	KeysAfter    int64   `json:"keys_after_hold"`
	KeysReleased int64   `json:"keys_after_release"`

	UnlockSeconds   float64        `json:"unlock_seconds"`
	GoroutineLeak   int            `json:"goroutines_left_after_close"`
	LockErrors      map[string]int `json:"lock_errors,omitempty"`
	UnlockErrors    map[string]int `json:"unlock_errors,omitempty"`
	Error           string         `json:"error,omitempty"`
	AcquireTimedOut bool           `json:"acquire_timed_out,omitempty"`
	UnlockTimedOut  bool           `json:"unlock_timed_out,omitempty"`
}

// Bounds of the holding scenario's phases.
const (
	holdingAcquireTimeout = 60 * time.Second
	holdingUnlockTimeout  = 30 * time.Second
	holdingParallelism    = 64
)

// RunHolding makes one client of ad hold n locks on distinct names for
// hp.HoldFor() and measures the per-lock footprint in this process and the
// Redis load during the hold.
func RunHolding(ctx context.Context, ad lockers.Adapter, addr string, admin *redisx.Admin, n int, hp HoldingParams) (hm HoldingMetrics) {
	hm = HoldingMetrics{Library: ad.Name, Locks: n}
	unlocks := make([]func(context.Context) error, n) // allocated before the baseline
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("lockbench-hold-%d", i)
	}
	g0 := runtime.NumGoroutine()

	l, err := ad.New(addr)
	if err != nil {
		hm.Error = "new: " + err.Error()
		return hm
	}
	closed := false
	closeOnce := func() {
		if !closed {
			closed = true
			l.Close()
		}
	}
	defer closeOnce()

	// Warm up: the first lock may start long-lived background machinery
	// that is not a per-lock cost.
	{
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		u, err := l.Lock(wctx, "lockbench-hold-warmup")
		cancel()
		if err != nil {
			hm.Error = "warm-up lock: " + err.Error()
			return hm
		}
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = u(uctx)
		cancel()
		if err != nil {
			hm.Error = "warm-up unlock: " + err.Error()
			return hm
		}
	}
	time.Sleep(100 * time.Millisecond)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	gBase := runtime.NumGoroutine()

	// Acquire all locks with bounded parallelism.
	var (
		mu        sync.Mutex
		lockErrs  = map[string]int{}
		acquired  atomic.Int64
		next      atomic.Int64
		wg        sync.WaitGroup
		t0        = time.Now()
		actx, acc = context.WithTimeout(ctx, holdingAcquireTimeout)
	)
	for w := 0; w < holdingParallelism; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || actx.Err() != nil {
					return
				}
				u, err := l.Lock(actx, names[i])
				if err != nil {
					mu.Lock()
					addCount(lockErrs, err.Error(), 1)
					mu.Unlock()
					continue
				}
				unlocks[i] = u
				acquired.Add(1)
			}
		}()
	}
	if !waitTimeout(&wg, holdingAcquireTimeout+10*time.Second) {
		hm.Error = "Lock calls did not return within 10s after their context deadline; abandoned"
		acc()
		return hm
	}
	hm.AcquireTimedOut = actx.Err() != nil
	acc()
	hm.AcquireSeconds = time.Since(t0).Seconds()
	hm.Acquired = int(acquired.Load())
	if len(lockErrs) > 0 {
		hm.LockErrors = lockErrs
	}

	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	gHeld := runtime.NumGoroutine()
	if hm.Acquired > 0 {
		hm.GoroutinesPerLock = Num(float64(gHeld-gBase) / float64(hm.Acquired))
		hm.HeapBytesPerLock = Num((float64(ms1.HeapAlloc) - float64(ms0.HeapAlloc)) / float64(hm.Acquired))
	}

	// Hold, measuring the server's load.
	hm.KeysBefore, _ = admin.DBSize(ctx)
	s0, err0 := admin.Snapshot(ctx)
	sleepCtx(ctx, hp.HoldFor())
	s1, err1 := admin.Snapshot(ctx)
	hm.KeysAfter, _ = admin.DBSize(ctx)
	if err0 != nil || err1 != nil {
		hm.Error = fmt.Sprintf("INFO: %v %v", err0, err1)
	} else {
		d := s1.Sub(s0)
		hm.HoldSeconds = d.Elapsed.Seconds()
		hm.CmdsPerSec = Num(float64(d.Commands) / hm.HoldSeconds)
		hm.CPUPerSec = Num(d.CPU / hm.HoldSeconds)
		if hm.Acquired > 0 {
			hm.CmdsPerLockS = hm.CmdsPerSec / Num(hm.Acquired)
		}
	}

	// Release everything.
	t1 := time.Now()
	uctx, ucc := context.WithTimeout(context.Background(), holdingUnlockTimeout)
	unlockErrs := map[string]int{}
	next.Store(0)
	for w := 0; w < holdingParallelism; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || uctx.Err() != nil {
					return
				}
				if unlocks[i] == nil {
					continue
				}
				if err := unlocks[i](uctx); err != nil {
					mu.Lock()
					addCount(unlockErrs, err.Error(), 1)
					mu.Unlock()
				}
			}
		}()
	}
	if !waitTimeout(&wg, holdingUnlockTimeout+10*time.Second) {
		hm.Error = "Unlock calls did not return within 10s after their context deadline; abandoned"
		ucc()
		return hm
	}
	hm.UnlockTimedOut = uctx.Err() != nil
	ucc()
	hm.UnlockSeconds = time.Since(t1).Seconds()
	if len(unlockErrs) > 0 {
		hm.UnlockErrors = unlockErrs
	}

	hm.KeysReleased, _ = admin.DBSize(ctx)
	closeOnce()
	// Give background goroutines a moment to exit, then count what is left.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && runtime.NumGoroutine() > g0; {
		time.Sleep(20 * time.Millisecond)
	}
	hm.GoroutineLeak = runtime.NumGoroutine() - g0
	return hm
}

// waitTimeout waits for wg for at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
