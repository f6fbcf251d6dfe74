package baton_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
	"go.uber.org/goleak"
)

// Chaos tests: internal/checker runs 3 clients x 4 goroutines on 2 lock
// names, a semaphore of 2 permits and an election (lease 1 s) while a
// fault disturbs Redis or the network, and checks mutual exclusion (at
// most 2 holders of the semaphore, one leader), fencing, liveness, errors
// and leaks; Observe readers and Leader calls of every client must see
// leaders in token order and agree once the fault is over. Each runs for
// BATON_CHAOS_DURATION (default 3s); `make chaos` sets it longer. The file
// is in package baton_test because internal/checker imports baton.

const chaosLease = time.Second

func chaosDuration(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("BATON_CHAOS_DURATION")
	if s == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("BATON_CHAOS_DURATION=%q: want a positive duration like 60s", s)
	}
	return d
}

// chaosConfig points every client at srv, except those given an address in
// via (e.g. a fault proxy).
func chaosConfig(t *testing.T, srv *redistest.Server, via map[int]string) checker.Config {
	return checker.Config{
		Clients:    3,
		Goroutines: 4,
		Names:      2,
		Semaphores: []int{2},
		Elections:  1,
		Duration:   chaosDuration(t),
		Hold:       20 * time.Millisecond,
		Options: func(i int) baton.Options {
			o := srv.Option()
			if a, ok := via[i]; ok {
				o.InitAddress = []string{a}
			}
			return baton.Options{Redis: o, LeaseTTL: chaosLease}
		},
		Redis: srv.Option,
		// The reaper of a redis-server restarted by the fault is the
		// harness's, not a leak of the code under test.
		LeakOptions: append(redistest.KnownLeaks(),
			goleak.IgnoreAnyFunction("github.com/batonlock/baton/internal/redistest.(*Server).launch.func1")),
	}
}

// runChaos runs the checker, logs its report and fails on its findings.
func runChaos(t *testing.T, srv *redistest.Server, cfg checker.Config, fault func(ctx context.Context)) checker.Report {
	t.Helper()
	rep := runChecker(t, []*redistest.Server{srv}, cfg, fault)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	return rep
}

// runChecker runs the checker against the servers and logs its report.
func runChecker(t *testing.T, servers []*redistest.Server, cfg checker.Config, fault func(ctx context.Context)) checker.Report {
	t.Helper()
	// Harness clients must exist before the run: the checker counts
	// goroutines started during the run as left behind.
	for _, n := range servers {
		if err := n.Do(t, "PING").Error(); err != nil {
			t.Fatalf("PING %s: %v", n.Addr(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+2*time.Minute)
	defer cancel()
	rep, err := checker.Run(ctx, cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	return rep
}

// every runs f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	tk := time.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

// TestChaosBaseline: no fault. Nothing may be lost and no error may reach
// a caller.
func TestChaosBaseline(t *testing.T) {
	srv := redistest.Start(t)
	cfg := chaosConfig(t, srv, nil)
	cfg.StrictErrors = true
	rep := runChaos(t, srv, cfg, nil)
	if rep.LossesSignalled != 0 || rep.RedisErrors() != 0 || rep.WritesRejected != 0 || rep.WritesUnknown != 0 {
		t.Fatalf("without faults: %d losses, %d redis errors, %d rejected and %d unknown writes",
			rep.LossesSignalled, rep.RedisErrors(), rep.WritesRejected, rep.WritesUnknown)
	}
	if rep.WritesApplied < 20 {
		t.Fatalf("only %d increments in %v", rep.WritesApplied, cfg.Duration)
	}
}

// TestChaosConnectionKill: every client connection (commands and pub/sub)
// is killed every 500 ms.
func TestChaosConnectionKill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noCache bool
	}{{"tracking", false}, {"no-cache", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := chaosConfig(t, srv, nil)
			opts := cfg.Options
			cfg.Options = func(i int) baton.Options {
				o := opts(i)
				o.Redis.DisableCache = tc.noCache
				return o
			}
			var kills, killed atomic.Int64
			rep := runChaos(t, srv, cfg, func(ctx context.Context) {
				every(ctx, 500*time.Millisecond, func() {
					kills.Add(1)
					for _, typ := range []string{"normal", "pubsub"} {
						n, err := srv.Do(t, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").AsInt64()
						if err != nil {
							t.Errorf("CLIENT KILL TYPE %s: %v", typ, err)
						}
						killed.Add(n)
					}
				})
			})
			t.Logf("%d kill rounds closed %d connections", kills.Load(), killed.Load())
			if kills.Load() < 2 || killed.Load() < kills.Load() {
				t.Fatalf("%d kill rounds closed %d connections: the fault did not happen", kills.Load(), killed.Load())
			}
			if rep.AfterFault == 0 {
				t.Fatal("no acquisitions after the kills stopped")
			}
		})
	}
}

// TestChaosRestart: Redis restarts mid-run. Without persistence the locks
// and counters vanish: an overlap across the restart is excused only if
// the old holder (of a lock, a permit or a leadership, one of each paused
// across it) heard of the loss within chaosRestartTellBound of the new
// holder's acquisition (or of its own first check), the counter is not
// checked, and fencing tokens must keep rising. With an fsynced AOF everything survives and every check
// applies.
func TestChaosRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		loss bool
	}{
		{"volatile", nil, true},
		{"aof", []string{"--appendonly", "yes", "--appendfsync", "always"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			cfg := chaosConfig(t, srv, nil)
			cfg.DataLoss = tc.loss
			if tc.loss {
				cfg.TellBound = chaosRestartTellBound
			}
			var restarted atomic.Bool
			rep := runChaos(t, srv, cfg, func(ctx context.Context) {
				at := cfg.Duration / 3
				if tc.loss {
					at = cfg.Duration / 6 // pausing the three holders may take a while
				}
				tm := time.NewTimer(at)
				defer tm.Stop()
				select {
				case <-ctx.Done():
					return
				case <-tm.C:
				}
				restart := func() {
					end := checker.ControlFrom(ctx).DataLoss()
					// On failure Restart's t.Fatalf ends this goroutine only; the
					// test then fails on restarted being false.
					srv.Restart(t)
					end()
					restarted.Store(true)
				}
				if !tc.loss {
					restart()
					return
				}
				// A lock, a leadership and a permit held across it (if
				// holders of all three can be paused in time).
				n := holdAcrossLoss(t, ctx, restart)
				if !restarted.Load() {
					restart()
				}
				t.Logf("%d names taken over from a holder paused across the restart", n)
			})
			if !restarted.Load() {
				t.Fatal("Redis was not restarted")
			}
			if rep.AfterFault == 0 {
				t.Fatal("no acquisitions after the restart")
			}
			if !tc.loss && rep.AppliedInRedis < rep.WritesApplied {
				t.Fatalf("AOF lost increments: %d in Redis, %d acknowledged", rep.AppliedInRedis, rep.WritesApplied)
			}
		})
	}
}

// TestChaosPartitionedHolder: a holder's connection is black-holed for
// longer than the lease. It must be told of the loss before any other
// client acquires the lock; likewise an election's leader, before anyone
// else leads.
func TestChaosPartitionedHolder(t *testing.T) {
	t.Run("lock", func(t *testing.T) { partitionedHolder(t, false) })
	t.Run("leader", func(t *testing.T) { partitionedHolder(t, true) })
}

func partitionedHolder(t *testing.T, leader bool) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	cfg := chaosConfig(t, srv, map[int]string{0: p.Addr()})
	var checked atomic.Bool
	rep := runChaos(t, srv, cfg, func(ctx context.Context) {
		ctl := checker.ControlFrom(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		// A holder of client 0 that has held its lock and not yet looked at
		// its loss signal; paused, so it still holds when the partition starts.
		victim, err := ctl.Pause(fctx, checker.BeforeCheck, func(h checker.Holder) bool {
			return h.Client == 0 && h.Limit == 0 && h.Election == leader
		})
		if err != nil {
			t.Error(err)
			return
		}
		p.Blackhole(true)
		start := time.Now()
		other, err := ctl.Pause(fctx, checker.AfterWrite, func(h checker.Holder) bool {
			return h.Client != 0 && h.Name == victim.Name
		})
		if err != nil {
			p.Blackhole(false)
			victim.Resume()
			t.Error(err)
			return
		}
		lost, ok := victim.LostAt()
		switch {
		case !ok:
			t.Errorf("client %d acquired %s (token %d) %v into the partition, but the partitioned holder (token %d) was not told of its loss",
				other.Client, other.Name, other.Token, other.Acquired.Sub(start), victim.Token)
		case !lost.Before(other.Acquired):
			t.Errorf("loss signalled %v after the other client acquired", lost.Sub(other.Acquired))
		default:
			t.Logf("partitioned holder told of its loss %v into the partition, %v before client %d acquired",
				lost.Sub(start).Round(time.Millisecond), other.Acquired.Sub(lost).Round(time.Millisecond), other.Client)
			checked.Store(true)
		}
		if other.Token <= victim.Token {
			t.Errorf("new holder's token %d is not above the partitioned holder's %d", other.Token, victim.Token)
		}
		if d := chaosLease + chaosLease/2 - time.Since(start); d > 0 {
			time.Sleep(d) // the partition outlasts the lease
		}
		p.Blackhole(false)
		other.Resume()
		victim.Resume()
		out, err := victim.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if out.Wrote || !errors.Is(out.UnlockErr, baton.ErrLockLost) {
			t.Errorf("partitioned holder after the partition: wrote %v, Unlock %v; want no write and baton.ErrLockLost", out.Wrote, out.UnlockErr)
		}
	})
	if !checked.Load() {
		t.Fatal("the partition scenario did not complete")
	}
	if rep.LossHandovers == 0 || rep.MinLossLead <= 0 {
		t.Fatalf("report shows %d hand-overs after a loss (min lead %v)", rep.LossHandovers, rep.MinLossLead)
	}
}

// TestChaosLatency: one client's connection gets 20 ms latency with up to
// 20 ms jitter for the whole run: slower, but nothing lost, no errors.
func TestChaosLatency(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	p.SetLatency(20*time.Millisecond, 20*time.Millisecond)
	cfg := chaosConfig(t, srv, map[int]string{0: p.Addr()})
	cfg.StrictErrors = true
	rep := runChaos(t, srv, cfg, nil)
	if rep.LossesSignalled != 0 {
		t.Fatalf("%d locks lost to 20-40 ms of latency with a 1 s lease", rep.LossesSignalled)
	}
}

// TestChaosScriptFlush: SCRIPT FLUSH every 100 ms. Scripts are reloaded
// transparently: no error may reach a caller.
func TestChaosScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	cfg := chaosConfig(t, srv, nil)
	cfg.StrictErrors = true
	var flushes atomic.Int64
	rep := runChaos(t, srv, cfg, func(ctx context.Context) {
		every(ctx, 100*time.Millisecond, func() {
			if err := srv.Do(t, "SCRIPT", "FLUSH").Error(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
			}
			flushes.Add(1)
		})
	})
	if flushes.Load() < 5 {
		t.Fatalf("only %d flushes", flushes.Load())
	}
	if n := rep.RedisErrors(); n != 0 || rep.LossesSignalled != 0 {
		t.Fatalf("%d Redis errors and %d losses reached callers", n, rep.LossesSignalled)
	}
}

// TestChaosStaleWriter: a holder pauses between its loss check and its
// write, its renewals black-holed, until another client has taken the lock
// and written. Woken, it writes anyway: the fence refuses it because its
// token is lower, and its Unlock reports baton.ErrLockLost and leaves the new
// holder's key alone.
func TestChaosStaleWriter(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	cfg := chaosConfig(t, srv, map[int]string{0: p.Addr()})
	var checked atomic.Bool
	runChaos(t, srv, cfg, func(ctx context.Context) {
		ctl := checker.ControlFrom(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		stale, err := ctl.Pause(fctx, checker.AfterCheck, func(h checker.Holder) bool {
			return h.Client == 0 && h.Limit == 0 && !h.Election // a lock: its key is read below
		})
		if err != nil {
			t.Error(err)
			return
		}
		p.Blackhole(true)
		fresh, err := ctl.Pause(fctx, checker.AfterWrite, func(h checker.Holder) bool {
			return h.Client != 0 && h.Name == stale.Name
		})
		p.Blackhole(false)
		if err != nil {
			stale.Resume()
			t.Error(err)
			return
		}
		defer fresh.Resume()
		if fresh.Token <= stale.Token {
			t.Errorf("fresh token %d not above the stale holder's %d", fresh.Token, stale.Token)
		}
		stale.Resume()
		out, err := stale.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if !out.Wrote || out.Applied || out.WriteErr != nil {
			t.Errorf("stale write: attempted %v, applied %v, err %v; want attempted and refused by the fence", out.Wrote, out.Applied, out.WriteErr)
		}
		if !errors.Is(out.UnlockErr, baton.ErrLockLost) {
			t.Errorf("stale Unlock: %v, want baton.ErrLockLost", out.UnlockErr)
		}
		if out.LostAt.IsZero() || !out.LostAt.Before(fresh.Acquired) {
			t.Errorf("stale holder told of its loss at %v, fresh holder acquired at %v", out.LostAt, fresh.Acquired)
		}
		// The fresh holder still holds, and its key is untouched.
		if err := fresh.Lock.Err(); err != nil {
			t.Errorf("fresh holder lost its lock after the stale Unlock: %v", err)
		}
		var owner string
		for _, h := range ctl.Clients()[fresh.Client].Session().Held() {
			if h.Name == fresh.Name {
				owner = h.Owner
			}
		}
		if v, err := srv.Do(t, "GET", baton.DefaultKeyPrefix+":{"+fresh.Name+"}").ToString(); err != nil || owner == "" || v != owner {
			t.Errorf("lock key %q (%v), want the fresh holder's %q", v, err, owner)
		}
		fresh.Resume()
		fo, err := fresh.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if fo.UnlockErr != nil {
			t.Errorf("fresh holder's Unlock: %v", fo.UnlockErr)
		}
		checked.Store(true)
	})
	if !checked.Load() {
		t.Fatal("the stale-writer scenario did not complete")
	}
}
