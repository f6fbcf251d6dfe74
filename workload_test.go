package baton_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// The randomized workload (internal/checker.RunWorkload) through the public
// API only: Clients with leases of 300 ms, 1 s and 10 s (and one shape with
// a single lease), extra Sessions closed and re-made, whole Clients closed
// and re-made, 1-16 names (some of them semaphores of 2 or 3 permits, or
// an election), random Lock/TryLock/Unlock/Do, Acquire/TryAcquire and
// Campaign with random ctx deadlines (down to tens of microseconds),
// cancels and holds, with and without faults, and in one shape bursts of
// calls on one name with idle gaps (lock caching). The oracles are
// documented on checker.WorkloadReport.
//
// BATON_SOAK_DURATION is the total time of TestWorkload, shared equally by
// its shapes (default 3 s a shape, 1 s with -short); `make soak` sets it.
// BATON_SOAK_SEED repeats the random choices of a run (not its
// scheduling); every run logs its seed.

type workloadShape struct {
	name     string
	leases   []time.Duration
	sessions []time.Duration // leases of extra sessions; nil: leases
	names    int
	sems     []int // limits of semaphore names besides the lock names
	elect    int   // election names besides those
	cohort   []int // CohortLimit per client slot; nil: default
	kills    bool  // CLIENT KILL of every connection at random times

	// The edge shapes (see workload_shapes_test.go).
	share      float64       // of the standard duration of a shape; 0: 1
	goroutines int           // per Client; 0: the checker's default
	extra      int           // extra sessions per Client; 0: default, negative: none
	maxHold    time.Duration // 0: the checker's default
	observers  bool          // Observe readers on every election, oracles (k) and (l)
	children   bool          // child processes SIGKILLed while waiting or holding
	outside    bool          // DEL of held keys and FLUSHALL from outside
	latency    time.Duration // one-way latency (plus as much jitter) of every Client's connections
	pauses     bool          // CLIENT PAUSE 50 WRITE at random times, with a FaultGrace of 100 ms

	// Lock caching (see workload_shapes_test.go).
	bursts bool // workers in bursts with idle gaps (checker.Bursts, defaults)
}

var workloadShapes = []workloadShape{
	// Mixed leases on many names: little contention per name, many sessions.
	{name: "mixed-16", leases: mixedLeases, names: 16, cohort: []int{0, 1, 2}},
	// Mixed leases on two names: heavy contention, queues of several sessions.
	{name: "mixed-2", leases: mixedLeases, names: 2, cohort: []int{0, 1, 2}},
	// One lease for everyone, one name: FIFO between sessions.
	{name: "one-lease-1", leases: []time.Duration{time.Second, time.Second, time.Second}, names: 1},
	// Mixed leases while every connection is killed now and then; three
	// more names are semaphores and an election.
	{name: "kills-4", leases: mixedLeases, names: 4, sems: []int{2, 3}, elect: 1, kills: true, observers: true},
	// Semaphores of 2 and 3 and an election beside a lock, mixed leases:
	// permits and leaderships contended by sessions of several goroutines,
	// released, timed out and closed.
	{name: "sems", leases: mixedLeases, names: 1, sems: []int{2, 3}, elect: 1, cohort: []int{0, 1, 2}, observers: true},
	edgeShapes[0], edgeShapes[1], edgeShapes[2], edgeShapes[3],
	cacheShapes[0],
}

var mixedLeases = []time.Duration{300 * time.Millisecond, time.Second, 10 * time.Second}

// workloadDuration is each shape's share of BATON_SOAK_DURATION.
func workloadDuration(t *testing.T, shapes int) time.Duration {
	t.Helper()
	s := os.Getenv("BATON_SOAK_DURATION")
	if s == "" {
		if testing.Short() {
			return time.Second
		}
		return 3 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("BATON_SOAK_DURATION=%q: want a positive duration like 10m", s)
	}
	return max(d/time.Duration(shapes), time.Second)
}

func workloadSeed(t *testing.T) uint64 {
	t.Helper()
	s := os.Getenv("BATON_SOAK_SEED")
	if s == "" {
		return rand.Uint64() | 1
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("BATON_SOAK_SEED=%q: want a positive integer", s)
	}
	return n
}

// TestWorkload runs every shape and fails on any oracle's finding.
func TestWorkload(t *testing.T) {
	d := workloadDuration(t, len(workloadShapes))
	seed := workloadSeed(t)
	for i, sh := range workloadShapes {
		t.Run(sh.name, func(t *testing.T) {
			runWorkload(t, sh, sh.duration(d), seed, seed+uint64(i))
		})
	}
}

// runWorkload runs one shape; base is the seed TestWorkload was given,
// seed this shape's.
func runWorkload(t *testing.T, sh workloadShape, d time.Duration, base, seed uint64) {
	srv := redistest.Start(t)
	// The harness client must exist before the run: the checker counts
	// goroutines started during the run as left behind.
	if err := srv.Do(t, "PING").Error(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	addr := srv.Addr()
	if sh.latency > 0 {
		p := faultproxy.Start(t, addr)
		p.SetLatency(sh.latency, sh.latency)
		addr = p.Addr()
	}
	cfg := checker.Workload{
		Leases:        sh.leases,
		SessionLeases: sh.sessions,
		Names:         sh.names,
		Semaphores:    sh.sems,
		Elections:     sh.elect,
		Duration:      d,
		Seed:          seed,
		Options: func(slot int) baton.Options {
			o := baton.Options{Redis: srv.Option()}
			o.Redis.InitAddress = []string{addr}
			if slot < len(sh.cohort) {
				o.CohortLimit = sh.cohort[slot]
			}
			return o
		},
		Redis:       srv.Option,
		LeakOptions: redistest.KnownLeaks(),
	}
	sh.configure(&cfg)
	var fault func(ctx context.Context)
	switch {
	case sh.kills:
		fault = func(ctx context.Context) { killConnections(t, ctx, srv, seed) }
	case sh.outside:
		fault = func(ctx context.Context) { changeKeys(t, ctx, srv, seed) }
	case sh.pauses:
		fault = func(ctx context.Context) { pauseWrites(t, ctx, srv, seed) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	t.Logf("shape %s: %d names, semaphores %v, %d elections, leases %v, %v, seed %d (BATON_SOAK_SEED=%d repeats the choices)",
		sh.name, sh.names, sh.sems, sh.elect, sh.leases, d, seed, base)
	rep, err := checker.RunWorkload(ctx, cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if sh.kills && rep.Faults == 0 {
		t.Fatal("no connection was killed: the fault did not happen")
	}
	sh.checkRan(t, rep)
}

// killConnections kills every client connection (commands and pub/sub) of
// srv at random intervals of 0.3-1.2 s until ctx ends, marking each kill as
// a fault window.
func killConnections(t *testing.T, ctx context.Context, srv *redistest.Server, seed uint64) {
	ctl := checker.WorkloadControlFrom(ctx)
	rng := rand.New(rand.NewPCG(seed, 7))
	atRandom(ctx, rng, 300*time.Millisecond, 900*time.Millisecond, func() {
		end := ctl.Fault()
		for _, typ := range []string{"normal", "pubsub"} {
			if err := srv.Do(t, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Error(); err != nil {
				t.Errorf("CLIENT KILL TYPE %s: %v", typ, err)
			}
		}
		end()
	})
}

// atRandom calls fault at random intervals of min to min+spread until ctx
// ends.
func atRandom(ctx context.Context, rng *rand.Rand, min, spread time.Duration, fault func()) {
	for {
		tm := time.NewTimer(min + time.Duration(rng.Int64N(int64(spread))))
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		fault()
	}
}
