package baton_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/redistest"
)

// The workload shapes at the edges of waiting and holding, each with a
// shorter share of the run than the others in `make test` (share):
//
//   - sem-crowd: one session per Client with more goroutines than the
//     semaphore's limit and longer holds: no waiter asleep while a permit
//     is free (d), FIFO between sessions (e);
//   - linger-join: one contended lock, two goroutines per session, every
//     connection 2-4 ms away (a proxy), and every 100-300 ms Redis
//     pauses writes for 50 ms (CLIENT PAUSE 50 WRITE, a fault window
//     with a grace of 100 ms: it only delays): a holder's release is held
//     in flight while the other goroutine of its session joins (a waiter
//     joining a lingering release), judged by (d) and (e);
//   - outside: DEL of held keys (locks, semaphore hashes, election
//     hashes) while waiters of other Clients are queued, and now and then
//     FLUSHALL: the old holder told before a new one returns, within
//     TellBound (b), no waiter asleep on a free name beyond the
//     documented bound (d); Observe readers, (k) and (l);
//   - crash: child processes (TestWorkloadChild) take a lock, a permit or
//     a leadership and are SIGKILLed while queued or holding; Observe
//     readers, (k) and (l).
//
// sems and kills-4 run Observe readers too.
var edgeShapes = []workloadShape{
	{name: "sem-crowd", leases: []time.Duration{time.Second, time.Second, 10 * time.Second}, names: 1, sems: []int{2},
		share: 0.5, goroutines: 6, extra: -1, maxHold: 50 * time.Millisecond},
	{name: "linger-join", leases: []time.Duration{600 * time.Millisecond, 600 * time.Millisecond, 600 * time.Millisecond}, names: 1,
		share: 0.5, goroutines: 2, extra: -1, maxHold: 150 * time.Millisecond, latency: 2 * time.Millisecond, pauses: true},
	{name: "outside", leases: mixedLeases, names: 2, sems: []int{2}, elect: 1,
		share: 0.7, observers: true, outside: true},
	{name: "crash", leases: mixedLeases, names: 2, sems: []int{2}, elect: 1,
		share: 0.7, observers: true, children: true},
}

// The workload shape of lock caching (Options.CacheIdle, default 50 ms):
//
//   - cache-bursts: three Clients (leases 300 ms, 1 s, 10 s; their extra
//     sessions closed and re-made, the Clients restarted, as in the other
//     shapes) share three lock names; each of their two workers makes
//     bursts of 3-30 back-to-back Lock/Do/TryLock calls on one name in one
//     session (holds mostly under 2 ms, no think time), then idles
//     10-150 ms, so that a session's next burst finds the name still
//     cached, or recalled by another session's burst meanwhile, or
//     released as its cache time ran out, and a name recalled is cached
//     again once its recall is LeaseTTL/2 old. Every oracle judges it as
//     any other shape: (d) also the waits on a name cached in another
//     session (held in Redis, free by the record: a recall is one
//     message, so the bound holds). It fails unless some acquisitions came
//     from the cache (Event.How) and some cached lock was recalled: granted
//     to another session after a read of the key found it still cached
//     (see internal/checker/workload_cache.go). Short holds keep the names
//     idle part of the time: with holds of up to 10 ms the names are
//     nearly always contended, so locks are mostly granted, which are
//     not cached, and another session rarely meets a cached one.
var cacheShapes = []workloadShape{
	{name: "cache-bursts", leases: mixedLeases, names: 3,
		share: 0.7, goroutines: 2, maxHold: 2 * time.Millisecond, bursts: true},
}

// duration is the shape's share of d.
func (sh workloadShape) duration(d time.Duration) time.Duration {
	if sh.share <= 0 {
		return d
	}
	return max(time.Duration(float64(d)*sh.share), time.Second)
}

// configure applies the shape's issue-16 settings to cfg.
func (sh workloadShape) configure(cfg *checker.Workload) {
	cfg.Goroutines, cfg.Sessions, cfg.MaxHold, cfg.Observers = sh.goroutines, sh.extra, sh.maxHold, sh.observers
	if sh.pauses {
		cfg.FaultGrace = 100 * time.Millisecond // a pause only delays: no error, no loss
	}
	if sh.children {
		cfg.Child = func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^TestWorkloadChild$") }
	}
	if sh.bursts {
		cfg.Bursts = &checker.Bursts{}
	}
}

// checkRan fails if what the shape is for did not happen.
func (sh workloadShape) checkRan(t *testing.T, rep checker.WorkloadReport) {
	t.Helper()
	switch {
	case sh.observers && rep.LeadersSeen == 0:
		t.Fatal("no leader read by an Observe reader: (k) checked nothing")
	case sh.children && (rep.ChildHolds == 0 || rep.ChildKilledWaiting == 0):
		t.Fatalf("%d children: %d acquisitions, %d killed while waiting", rep.Children, rep.ChildHolds, rep.ChildKilledWaiting)
	case sh.outside && !strings.Contains(rep.Changes, "DEL"):
		t.Fatalf("outside changes %q: no DEL", rep.Changes)
	case sh.bursts && (rep.CachedAcquisitions == 0 || rep.Recalls == 0):
		t.Fatalf("lock caching not exercised: %d acquisitions from the cache, %d recalls of a cached lock seen",
			rep.CachedAcquisitions, rep.Recalls)
	}
}

// TestWorkloadChild is a child process of the crash shape
// (checker.RunChild); it runs only when the workload starts it.
func TestWorkloadChild(t *testing.T) {
	if !checker.IsChild() {
		t.Skip("a child process of TestWorkload's crash shape")
	}
	if err := checker.RunChild(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

// changeKeys, at random intervals of 150-450 ms until ctx ends, deletes
// the main key of a held name (a lock key, or a semaphore's or
// election's hash), one with waiters queued if it finds one among a few
// names it looks at; one change in six is a FLUSHALL instead. Each is
// marked with WorkloadControl.Outside.
func changeKeys(t *testing.T, ctx context.Context, srv *redistest.Server, seed uint64) {
	ctl := checker.WorkloadControlFrom(ctx)
	rng := rand.New(rand.NewPCG(seed, 11))
	names := ctl.Names()
	i := 0
	atRandom(ctx, rng, 150*time.Millisecond, 300*time.Millisecond, func() {
		if i++; i%6 == 0 {
			end := ctl.Outside("FLUSHALL")
			err := srv.Do(t, "FLUSHALL").Error()
			end()
			if err != nil {
				t.Errorf("FLUSHALL: %v", err)
			}
			return
		}
		name := heldName(t, srv, ctl, names, rng)
		if name == "" {
			return
		}
		end := ctl.Outside("DEL", name)
		err := srv.Do(t, "DEL", ctl.Key(name)).Error()
		end()
		if err != nil {
			t.Errorf("DEL %s: %v", ctl.Key(name), err)
		}
	})
}

// heldName looks at up to four random names and returns the first that is
// held with sessions queued, else the first held, else "".
func heldName(t *testing.T, srv *redistest.Server, ctl *checker.WorkloadControl, names []string, rng *rand.Rand) string {
	held := ""
	for range 4 {
		name := names[rng.IntN(len(names))]
		key := ctl.Key(name)
		var isHeld bool
		if v, err := srv.Do(t, "GET", key).ToString(); err == nil {
			isHeld = !strings.HasPrefix(v, "~") // a lock key: a "~" marker is a free name
		} else if fields, err := srv.Do(t, "HKEYS", key).AsStrSlice(); err == nil {
			for _, f := range fields {
				isHeld = isHeld || !strings.HasPrefix(f, "#") // a hash: "#" fields are not holders
			}
		}
		if !isHeld {
			continue
		}
		if n, _ := srv.Do(t, "LLEN", key+":q").AsInt64(); n > 0 {
			return name
		}
		if held == "" {
			held = name
		}
	}
	return held
}

// pauseWrites makes Redis hold every write for 50 ms (CLIENT PAUSE 50
// WRITE), at random intervals of 100-300 ms until ctx ends, each pause a
// fault window that ends with it.
func pauseWrites(t *testing.T, ctx context.Context, srv *redistest.Server, seed uint64) {
	const pause = 50 * time.Millisecond
	ctl := checker.WorkloadControlFrom(ctx)
	rng := rand.New(rand.NewPCG(seed, 13))
	atRandom(ctx, rng, 100*time.Millisecond, 200*time.Millisecond, func() {
		end := ctl.Fault()
		if err := srv.Do(t, "CLIENT", "PAUSE", "50", "WRITE").Error(); err != nil {
			t.Errorf("CLIENT PAUSE: %v", err)
		}
		time.AfterFunc(pause, end) // the window ends with the pause
	})
}
