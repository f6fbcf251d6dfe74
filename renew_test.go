package baton

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestIdleHoldCost: 2,000 idle held locks cost about 2 Redis commands per
// lock per renewal tick, no goroutine per lock, and never wake anyone.
func TestIdleHoldCost(t *testing.T) {
	srv := redistest.Start(t)
	const n = 2000
	const lease = 1500 * time.Millisecond // a tick every 500 ms
	c := newClient(t, srv, Options{LeaseTTL: lease})
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
	if perLockTick > 2.05 {
		t.Fatalf("%.3f commands per lock per tick, want about 2", perLockTick)
	}
	for _, l := range locks {
		if l.Err() != nil {
			t.Fatalf("lock lost while idle: %v", l.Err())
		}
	}
	if st := c.Stats(); st.Held != n {
		t.Fatalf("Stats.Held %d, want %d", st.Held, n)
	}
}
