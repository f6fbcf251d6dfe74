package baton

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/redistest"
)

// TestIdleHoldCost: 2,000 idle held locks cost no goroutine per lock, never
// wake anyone, and per lock per renewal tick about 2 Redis commands (GET,
// PEXPIRE) with DisableHeldTracking, 3 without (a PTTL after the PEXPIRE
// keeps the key tracked, so that a holder hears of a change at once).
func TestIdleHoldCost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		untracked bool
		want      float64
	}{{"tracked", false, 3}, {"untracked", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const n = 2000
			const lease = 1500 * time.Millisecond // a tick every 500 ms
			c := newClient(t, srv, Options{LeaseTTL: lease, DisableHeldTracking: tc.untracked})
			ctx := ctxTimeout(t, 30*time.Second)
			g0 := runtime.NumGoroutine()
			var locks []*Lock
			for i := 0; i < n; i++ {
				l, err := c.TryLock(ctx, fmt.Sprintf("%s-%d", t.Name(), i))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			if g := runtime.NumGoroutine() - g0; g > 5 {
				t.Fatalf("%d more goroutines while holding %d locks", g, n)
			}
			time.Sleep(lease / 3) // the first renewals, which start tracking
			before := commandCounts(t, srv)
			time.Sleep(3 * lease) // the measurement window: about 9 ticks
			after := commandCounts(t, srv)
			d := func(cmd string) int64 { return after[cmd] - before[cmd] }
			renewals := d("pexpire")
			if renewals < 4*n {
				t.Fatalf("%d renewals in %v, want >= %d (4 ticks of %d locks)", renewals, 3*lease, 4*n, n)
			}
			if d("get") != renewals {
				t.Fatalf("%d GET for %d PEXPIRE: renewal should read each key once", d("get"), renewals)
			}
			var total int64
			for cmd := range after {
				if cmd != "info" {
					total += d(cmd)
				}
			}
			perLockTick := float64(total) / float64(renewals)
			t.Logf("%d renewals, %d commands: %.3f per lock per tick; scripts %d", renewals, total, perLockTick, d("evalsha")+d("eval"))
			if perLockTick > tc.want+0.05 {
				t.Fatalf("%.3f commands per lock per tick, want about %v", perLockTick, tc.want)
			}
			for _, l := range locks {
				if l.Err() != nil {
					t.Fatalf("lock lost while idle: %v", l.Err())
				}
			}
			if st := c.Stats(); st.Held != n {
				t.Fatalf("Stats.Held %d, want %d", st.Held, n)
			}
		})
	}
}

// TestHolderToldOfKeyChange: a holder whose key is deleted, overwritten or
// flushed from outside is told at once (Done closes, Err matches
// ErrLockLost), from a tracking invalidation, not at its next renewal
// (default lease: 3.33 s later, as round 1 did: a version of this test
// without waitTracked failed on its code). Measured from the change, once
// the first renewal has had Redis track the key.
func TestHolderToldOfKeyChange(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name   string
		change func(key string)
	}{
		{"DEL", func(key string) { srv.Do(t, "DEL", key) }},
		{"SET", func(key string) { srv.Do(t, "SET", key, "someone-else:1") }},
		{"FLUSHALL", func(string) { srv.Do(t, "FLUSHALL") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName(t)
			l, err := c.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
			waitTracked(t, c.Session(), name)
			tc.change(newKeys(DefaultKeyPrefix, name).Lock)
			changed := time.Now()
			select {
			case <-l.Done():
				t.Logf("told after %v", time.Since(changed))
			case <-time.After(time.Second):
				t.Fatalf("holder not told within 1 s of a %s of its key", tc.name)
			}
			if !errors.Is(l.Err(), ErrLockLost) {
				t.Fatalf("Err %v, want ErrLockLost", l.Err())
			}
		})
	}
}

// waitTracked waits until s has renewed its hold of name since it took it:
// that renewal (trackDelay in) has Redis track the key.
func waitTracked(t *testing.T, s *Session, name string) {
	t.Helper()
	waitSession(t, s, func() bool {
		n := s.m.Lookup(machine.ID{Name: name})
		if n == nil {
			return false
		}
		sn := n.Snapshot()
		return sn.State == machine.Held && sn.Deadline.After(sn.Since.Add(s.lease-s.m.Rules().Margin()))
	}, func() string { return "no renewal after the acquisition" })
}
