package workload

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/netcount"
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

	// Per renewal tick, during the hold (see netcount): socket writes,
	// and round trips = writes that end a pipelined batch (not keep-alive
	// PINGs, not full-buffer spills). Ticks are the bursts of writes seen
	// (a pause longer than a quarter of the renewal period separates two)
	// when that count is within one of the renewal periods in the hold
	// (baton renews everything at once); otherwise (rueidislock renews
	// each lock on its own timer) the renewal periods.
	Nodes             int           `json:"nodes"`
	NodesWithLocks    int           `json:"nodes_with_locks"`
	Periods           Num           `json:"renewal_periods"`      // hold seconds / renewal period
	Bursts            int           `json:"write_bursts"`         // bursts of writes seen in the hold
	Ticks             Num           `json:"ticks"`                // what the per-tick values divide by
	RoundTripsPerTick Num           `json:"round_trips_per_tick"` // all nodes
	WritesPerTick     Num           `json:"writes_per_tick"`      // all nodes, PINGs excluded
	PingsPerTick      Num           `json:"pings_per_tick"`
	Handshakes        int64         `json:"handshakes"`       // connections opened during the hold
	ScriptsPerTick    Num           `json:"scripts_per_tick"` // EVALSHA+EVAL, all nodes
	BytesPerTick      Num           `json:"bytes_per_tick"`
	PerNode           []HoldingNode `json:"per_node,omitempty"`

	UnlockSeconds   float64        `json:"unlock_seconds"`
	GoroutineLeak   int            `json:"goroutines_left_after_close"`
	LockErrors      map[string]int `json:"lock_errors,omitempty"`
	UnlockErrors    map[string]int `json:"unlock_errors,omitempty"`
	Error           string         `json:"error,omitempty"`
	AcquireTimedOut bool           `json:"acquire_timed_out,omitempty"`
	UnlockTimedOut  bool           `json:"unlock_timed_out,omitempty"`
}

// HoldingNode is one Redis node's share of the hold.
type HoldingNode struct {
	Addr              string           `json:"addr"`
	Keys              int64            `json:"keys_before_hold"`
	Conns             int64            `json:"conns"`       // connections the client opened to it (whole run)
	Writes            int64            `json:"writes"`      // during the hold, PINGs and handshakes excluded
	RoundTrips        int64            `json:"round_trips"` // writes that end a batch
	Pings             int64            `json:"pings"`
	Handshakes        int64            `json:"handshakes"` // new connections during the hold
	Bytes             int64            `json:"bytes"`
	RoundTripsInBurst []int            `json:"round_trips_in_burst"` // per burst seen
	RoundTripsPerTick Num              `json:"round_trips_per_tick"`
	WritesPerTick     Num              `json:"writes_per_tick"`
	ScriptsPerTick    Num              `json:"scripts_per_tick"`
	CmdsPerSec        Num              `json:"redis_cmds_per_sec"`
	CPUPerSec         Num              `json:"redis_cpu_per_sec"`
	Calls             map[string]int64 `json:"calls,omitempty"` // commandstats delta over the hold
}

// Bounds of the holding scenario's phases.
const (
	holdingAcquireTimeout = 60 * time.Second
	holdingUnlockTimeout  = 30 * time.Second
	holdingParallelism    = 64
	warmupLocks           = 32
)

// RunHolding makes one client of ad hold n locks on distinct names for
// hp.HoldFor() and measures the per-lock footprint in this process and the
// Redis load during the hold. counter, if not nil, must be the Dial of the
// adapter's Config: it counts the client's socket writes per node.
func RunHolding(ctx context.Context, ad lockers.Adapter, t lockers.Target, admin *redisx.Admin, n int, hp HoldingParams, counter *netcount.Counter) (hm HoldingMetrics) {
	hm = HoldingMetrics{Library: ad.Name, Locks: n, Nodes: len(admin.Addrs())}
	unlocks := make([]func(context.Context) error, n) // allocated before the baseline
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("lockbench-hold-%d", i)
	}
	g0 := runtime.NumGoroutine()

	l, err := ad.New(t)
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

	if err := warmUp(ctx, l, hp.Renew()); err != nil {
		hm.Error = err.Error()
		return hm
	}
	time.Sleep(100 * time.Millisecond)
	heap0, gBase := liveHeap()
	if !hm.acquire(ctx, l, names, unlocks) {
		return hm
	}
	heap1, gHeld := liveHeap()
	if hm.Acquired > 0 {
		hm.GoroutinesPerLock = Num(float64(gHeld-gBase) / float64(hm.Acquired))
		hm.HeapBytesPerLock = Num((float64(heap1) - float64(heap0)) / float64(hm.Acquired))
	}
	hm.hold(ctx, admin, hp, counter)
	if !hm.release(unlocks) {
		return hm
	}
	hm.KeysReleased, _ = admin.DBSize(ctx)
	closeOnce()
	hm.GoroutineLeak = goroutinesLeft(g0)
	return hm
}

// warmUp takes the one-off costs out of the measurement: the first lock
// may start long-lived background machinery that is not a per-lock cost,
// and the first renewal loads the renewal script (EVALSHA -> NOSCRIPT ->
// EVAL, on each node). It holds a few locks (names spread over the
// cluster's nodes) across one renewal so that the hold measures the
// steady state.
func warmUp(ctx context.Context, l lockers.Locker, renew time.Duration) error {
	var warm []func(context.Context) error
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for i := 0; i < warmupLocks; i++ {
		u, err := l.Lock(wctx, fmt.Sprintf("lockbench-hold-warmup-%d", i))
		if err != nil {
			cancel()
			return fmt.Errorf("warm-up lock: %w", err)
		}
		warm = append(warm, u)
	}
	cancel()
	sleepCtx(ctx, renew+renew/4)
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, u := range warm {
		if err := u(uctx); err != nil {
			return fmt.Errorf("warm-up unlock: %w", err)
		}
	}
	return nil
}

// liveHeap collects garbage before reading the heap in use and counting
// goroutines, so that the difference between two calls is what stayed
// reachable in between (the held locks), not garbage made on the way.
func liveHeap() (heapBytes uint64, goroutines int) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// acquire takes every lock with bounded parallelism (unlocks[i] is the
// unlock of names[i]) and records how long that took. It reports false
// when the Lock calls had to be abandoned: nothing after is measurable.
func (hm *HoldingMetrics) acquire(ctx context.Context, l lockers.Locker, names []string, unlocks []func(context.Context) error) bool {
	var acquired atomic.Int64
	t0 := time.Now()
	actx, acc := context.WithTimeout(ctx, holdingAcquireTimeout)
	lockErrs, done := parallel(actx, len(names), holdingAcquireTimeout+10*time.Second, func(i int) error {
		u, err := l.Lock(actx, names[i])
		if err == nil {
			unlocks[i] = u
			acquired.Add(1)
		}
		return err
	})
	if !done {
		hm.Error = "Lock calls did not return within 10s after their context deadline; abandoned"
		acc()
		return false
	}
	hm.AcquireTimedOut = actx.Err() != nil
	acc()
	hm.AcquireSeconds = time.Since(t0).Seconds()
	hm.Acquired = int(acquired.Load())
	if len(lockErrs) > 0 {
		hm.LockErrors = lockErrs
	}
	return true
}

// hold keeps the locks for hp.HoldFor(), measuring the server's load and
// the client's writes: holding costs Redis only the renewals, and this is
// where they show.
func (hm *HoldingMetrics) hold(ctx context.Context, admin *redisx.Admin, hp HoldingParams, counter *netcount.Counter) {
	sizes, _ := admin.DBSizes(ctx)
	for _, k := range sizes {
		hm.KeysBefore += k
	}
	if counter != nil {
		counter.Record()
	}
	s0, err0 := admin.Snapshot(ctx)
	sleepCtx(ctx, hp.HoldFor())
	s1, err1 := admin.Snapshot(ctx)
	var events []netcount.Event
	if counter != nil {
		events = counter.Stop()
	}
	hm.KeysAfter, _ = admin.DBSize(ctx)
	if err0 != nil || err1 != nil {
		hm.Error = fmt.Sprintf("INFO: %v %v", err0, err1)
		return
	}
	d := s1.Sub(s0)
	hm.HoldSeconds = d.Elapsed.Seconds()
	hm.CmdsPerSec = Num(float64(d.Commands) / hm.HoldSeconds)
	hm.CPUPerSec = Num(d.CPU / hm.HoldSeconds)
	if hm.Acquired > 0 {
		hm.CmdsPerLockS = hm.CmdsPerSec / Num(hm.Acquired)
	}
	hm.perTick(d, sizes, events, counter, hp.Renew())
}

// release unlocks everything, bounded in time like acquire, so that a
// library whose Unlock hangs is reported rather than hanging the run. It
// reports false when the Unlock calls had to be abandoned.
func (hm *HoldingMetrics) release(unlocks []func(context.Context) error) bool {
	t1 := time.Now()
	uctx, ucc := context.WithTimeout(context.Background(), holdingUnlockTimeout)
	unlockErrs, done := parallel(uctx, len(unlocks), holdingUnlockTimeout+10*time.Second, func(i int) error {
		if unlocks[i] == nil {
			return nil
		}
		return unlocks[i](uctx)
	})
	if !done {
		hm.Error = "Unlock calls did not return within 10s after their context deadline; abandoned"
		ucc()
		return false
	}
	hm.UnlockTimedOut = uctx.Err() != nil
	ucc()
	hm.UnlockSeconds = time.Since(t1).Seconds()
	if len(unlockErrs) > 0 {
		hm.UnlockErrors = unlockErrs
	}
	return true
}

// goroutinesLeft counts the goroutines beyond g0 (the count before the
// client was made) once the background ones have had a moment to exit:
// what a closed client leaks.
func goroutinesLeft(g0 int) int {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && runtime.NumGoroutine() > g0; {
		time.Sleep(20 * time.Millisecond)
	}
	return runtime.NumGoroutine() - g0
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

// perTick fills the per-tick and per-node fields from the hold's INFO
// delta and the recorded writes.
func (hm *HoldingMetrics) perTick(d redisx.Delta, sizes []int64, events []netcount.Event, counter *netcount.Counter, renew time.Duration) {
	bursts := hm.countTicks(events, renew)
	if os.Getenv("LOCKBENCH_DEBUG_WRITES") != "" {
		printWrites(events)
	}
	var totals map[string]netcount.Totals
	if counter != nil {
		totals = counter.Totals()
	}
	known := map[string]bool{}
	var scripts int64
	for i, nd := range d.Nodes {
		known[nd.Addr] = true
		hn := HoldingNode{Addr: nd.Addr, Calls: nd.Calls, ScriptsPerTick: hm.per(nd.Scripts()),
			CmdsPerSec: Num(float64(nd.Commands) / hm.HoldSeconds), CPUPerSec: Num(nd.CPU / hm.HoldSeconds)}
		if i < len(sizes) {
			hn.Keys = sizes[i]
			if sizes[i] > 0 {
				hm.NodesWithLocks++
			}
		}
		scripts += nd.Scripts()
		hm.addNode(hn, events, bursts, totals[hn.Addr].Conns, counter != nil)
	}
	// Writes to an address the admin does not know (should not happen).
	nan := Num(math.NaN())
	for a := range totals {
		if !known[a] {
			known[a] = true
			hm.addNode(HoldingNode{Addr: a, ScriptsPerTick: nan, CmdsPerSec: nan, CPUPerSec: nan}, events, bursts, totals[a].Conns, counter != nil)
		}
	}
	hm.ScriptsPerTick = hm.per(scripts)
	hm.sumNodes(counter != nil)
}

// countTicks sets what the per-tick values divide by: the bursts of
// writes (with a round trip) seen when their count is within one of the
// renewal periods in the hold (a client renewing everything at once),
// otherwise the periods (a client renewing each lock on its own timer).
// It returns the bursts.
func (hm *HoldingMetrics) countTicks(events []netcount.Event, renew time.Duration) []map[string]int {
	hm.Periods = Num(hm.HoldSeconds / renew.Seconds())
	bursts := netcount.Ticks(events, renew/4)
	// A burst without a round trip is the start of a renewal whose batch
	// was still being written (full-buffer spills) when the hold ended:
	// not a tick.
	hm.Bursts = 0
	for _, b := range bursts {
		for _, n := range b {
			if n > 0 {
				hm.Bursts++
				break
			}
		}
	}
	hm.Ticks = hm.Periods
	if hm.Bursts > 0 && math.Abs(float64(hm.Bursts)-float64(hm.Periods)) <= 1 {
		hm.Ticks = Num(hm.Bursts)
	}
	return bursts
}

// printWrites dumps the recorded writes (LOCKBENCH_DEBUG_WRITES), to see
// on the wire what the per-tick numbers summarise.
func printWrites(events []netcount.Event) {
	var t0 time.Time
	for _, e := range events {
		if t0.IsZero() {
			t0 = e.At
		}
		fmt.Fprintf(os.Stderr, "write %8.3fms %s %7d bytes ping=%v spill=%v %q\n", float64(e.At.Sub(t0).Microseconds())/1000, e.Addr, e.Bytes, e.Ping, e.Spill, e.Head)
	}
}

// per is x per tick, NaN without ticks: a count over a hold with no
// renewal in it says nothing per tick.
func (hm *HoldingMetrics) per(x int64) Num {
	if hm.Ticks <= 0 {
		return Num(math.NaN())
	}
	return Num(float64(x) / float64(hm.Ticks))
}

// addNode completes hn with the client's writes to its address (conns:
// the connections it opened there) and adds it to PerNode, where a
// cluster's renewals show how they spread over the nodes. counted is
// whether writes were recorded at all; if not, the per-tick writes are
// unknown (NaN), not zero.
func (hm *HoldingMetrics) addNode(hn HoldingNode, events []netcount.Event, bursts []map[string]int, conns int64, counted bool) {
	for _, e := range events {
		if e.Addr != hn.Addr {
			continue
		}
		switch {
		case e.Ping:
			hn.Pings++
		case e.Hello:
			hn.Handshakes++
		default:
			hn.Writes++
			hn.Bytes += int64(e.Bytes)
			if e.RoundTrip() {
				hn.RoundTrips++
			}
		}
	}
	for _, b := range bursts {
		hn.RoundTripsInBurst = append(hn.RoundTripsInBurst, b[hn.Addr])
	}
	hn.Conns = conns
	if counted {
		hn.RoundTripsPerTick, hn.WritesPerTick = hm.per(hn.RoundTrips), hm.per(hn.Writes)
	} else {
		nan := Num(math.NaN())
		hn.RoundTripsPerTick, hn.WritesPerTick = nan, nan
	}
	hm.PerNode = append(hm.PerNode, hn)
}

// sumNodes totals PerNode into the whole client's per-tick values, the
// ones compared across libraries; without recorded writes (counted false)
// they are unknown (NaN), not zero.
func (hm *HoldingMetrics) sumNodes(counted bool) {
	var writes, rts, pings, bytes int64
	for _, hn := range hm.PerNode {
		writes += hn.Writes
		rts += hn.RoundTrips
		pings += hn.Pings
		hm.Handshakes += hn.Handshakes
		bytes += hn.Bytes
	}
	if counted {
		hm.RoundTripsPerTick, hm.WritesPerTick, hm.PingsPerTick, hm.BytesPerTick = hm.per(rts), hm.per(writes), hm.per(pings), hm.per(bytes)
	} else {
		nan := Num(math.NaN())
		hm.RoundTripsPerTick, hm.WritesPerTick, hm.PingsPerTick, hm.BytesPerTick = nan, nan, nan, nan
	}
}

// parallel runs fn(i) for every i in [0, n) on holdingParallelism
// goroutines until ctx ends, and counts fn's errors by message. done is
// false when the goroutines were still running after wait (they are then
// abandoned, and errs is nil).
func parallel(ctx context.Context, n int, wait time.Duration, fn func(i int) error) (errs map[string]int, done bool) {
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		next   atomic.Int64
		wg     sync.WaitGroup
	)
	for w := 0; w < holdingParallelism; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					addCount(counts, err.Error(), 1)
					mu.Unlock()
				}
			}
		}()
	}
	if !waitTimeout(&wg, wait) {
		return nil, false
	}
	return counts, true
}
