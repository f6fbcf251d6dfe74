package batonprom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonprom "github.com/batonlock/baton/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newCollector(t testing.TB, opt batonprom.Options) *batonprom.Collector {
	t.Helper()
	c, err := batonprom.New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// TestExposition compares the whole text exposition after one event of
// every kind, all of locks, with small buckets: the series of semaphores
// and elections do not exist before their first event.
func TestExposition(t *testing.T) {
	c := newCollector(t, batonprom.Options{Buckets: []float64{0.01, 1}})
	ctx := context.Background()
	for _, ev := range []baton.Event{
		{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", Token: 1, How: baton.Free, Wait: time.Millisecond},
		{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"},
		{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Token: 1, Held: 5 * time.Millisecond},
		{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", Token: 2, How: baton.Granted, Wait: 500 * time.Millisecond, Queued: true},
		{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "a", Token: 2, Held: 2 * time.Second, Err: baton.ErrLockLost},
		{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"},
		{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "a", Wait: 3 * time.Second, Queued: true, Err: context.DeadlineExceeded},
		{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "b", Err: context.Canceled}, // did not wait
		{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "b", Token: 9, How: baton.Handoff},
		{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "b", Token: 9, Held: time.Second, Err: baton.ErrClosed},
		{Kind: baton.RenewalFailed, Err: errors.New("i/o timeout"), Count: 2},
		{Kind: baton.Rechecked, Count: 2},
		{Kind: 0},
	} {
		c.Observe(ctx, ev)
	}
	const want = `
# HELP baton_lock_acquisitions_total Locks, permits and leaderships acquired, by primitive and how.
# TYPE baton_lock_acquisitions_total counter
baton_lock_acquisitions_total{how="cached",primitive="lock"} 0
baton_lock_acquisitions_total{how="free",primitive="lock"} 1
baton_lock_acquisitions_total{how="granted",primitive="lock"} 1
baton_lock_acquisitions_total{how="handoff",primitive="lock"} 1
# HELP baton_lock_gave_up_total Lock, Acquire and Campaign calls that returned without the lock, permit or leadership, by primitive and reason.
# TYPE baton_lock_gave_up_total counter
baton_lock_gave_up_total{primitive="lock",reason="canceled"} 1
baton_lock_gave_up_total{primitive="lock",reason="closed"} 0
baton_lock_gave_up_total{primitive="lock",reason="error"} 0
baton_lock_gave_up_total{primitive="lock",reason="timeout"} 1
# HELP baton_lock_held Locks, permits and leaderships held now, by primitive.
# TYPE baton_lock_held gauge
baton_lock_held{primitive="lock"} 0
# HELP baton_lock_hold_seconds How long locks, permits and leaderships were held, by primitive and how they ended.
# TYPE baton_lock_hold_seconds histogram
baton_lock_hold_seconds_bucket{end="closed",primitive="lock",le="0.01"} 0
baton_lock_hold_seconds_bucket{end="closed",primitive="lock",le="1"} 1
baton_lock_hold_seconds_bucket{end="closed",primitive="lock",le="+Inf"} 1
baton_lock_hold_seconds_sum{end="closed",primitive="lock"} 1
baton_lock_hold_seconds_count{end="closed",primitive="lock"} 1
baton_lock_hold_seconds_bucket{end="lost",primitive="lock",le="0.01"} 0
baton_lock_hold_seconds_bucket{end="lost",primitive="lock",le="1"} 0
baton_lock_hold_seconds_bucket{end="lost",primitive="lock",le="+Inf"} 1
baton_lock_hold_seconds_sum{end="lost",primitive="lock"} 2
baton_lock_hold_seconds_count{end="lost",primitive="lock"} 1
baton_lock_hold_seconds_bucket{end="released",primitive="lock",le="0.01"} 1
baton_lock_hold_seconds_bucket{end="released",primitive="lock",le="1"} 1
baton_lock_hold_seconds_bucket{end="released",primitive="lock",le="+Inf"} 1
baton_lock_hold_seconds_sum{end="released",primitive="lock"} 0.005
baton_lock_hold_seconds_count{end="released",primitive="lock"} 1
# HELP baton_lock_losses_total Held locks, permits and leaderships lost before Unlock, by primitive.
# TYPE baton_lock_losses_total counter
baton_lock_losses_total{primitive="lock"} 1
# HELP baton_lock_renewal_errors_total Renewal round trips that failed and were retried.
# TYPE baton_lock_renewal_errors_total counter
baton_lock_renewal_errors_total 1
# HELP baton_lock_wait_seconds How long Lock, Acquire and Campaign calls waited (those that had to), by primitive and outcome.
# TYPE baton_lock_wait_seconds histogram
baton_lock_wait_seconds_bucket{outcome="acquired",primitive="lock",le="0.01"} 0
baton_lock_wait_seconds_bucket{outcome="acquired",primitive="lock",le="1"} 1
baton_lock_wait_seconds_bucket{outcome="acquired",primitive="lock",le="+Inf"} 1
baton_lock_wait_seconds_sum{outcome="acquired",primitive="lock"} 0.5
baton_lock_wait_seconds_count{outcome="acquired",primitive="lock"} 1
baton_lock_wait_seconds_bucket{outcome="canceled",primitive="lock",le="0.01"} 0
baton_lock_wait_seconds_bucket{outcome="canceled",primitive="lock",le="1"} 0
baton_lock_wait_seconds_bucket{outcome="canceled",primitive="lock",le="+Inf"} 0
baton_lock_wait_seconds_sum{outcome="canceled",primitive="lock"} 0
baton_lock_wait_seconds_count{outcome="canceled",primitive="lock"} 0
baton_lock_wait_seconds_bucket{outcome="closed",primitive="lock",le="0.01"} 0
baton_lock_wait_seconds_bucket{outcome="closed",primitive="lock",le="1"} 0
baton_lock_wait_seconds_bucket{outcome="closed",primitive="lock",le="+Inf"} 0
baton_lock_wait_seconds_sum{outcome="closed",primitive="lock"} 0
baton_lock_wait_seconds_count{outcome="closed",primitive="lock"} 0
baton_lock_wait_seconds_bucket{outcome="error",primitive="lock",le="0.01"} 0
baton_lock_wait_seconds_bucket{outcome="error",primitive="lock",le="1"} 0
baton_lock_wait_seconds_bucket{outcome="error",primitive="lock",le="+Inf"} 0
baton_lock_wait_seconds_sum{outcome="error",primitive="lock"} 0
baton_lock_wait_seconds_count{outcome="error",primitive="lock"} 0
baton_lock_wait_seconds_bucket{outcome="timeout",primitive="lock",le="0.01"} 0
baton_lock_wait_seconds_bucket{outcome="timeout",primitive="lock",le="1"} 0
baton_lock_wait_seconds_bucket{outcome="timeout",primitive="lock",le="+Inf"} 1
baton_lock_wait_seconds_sum{outcome="timeout",primitive="lock"} 3
baton_lock_wait_seconds_count{outcome="timeout",primitive="lock"} 1
# HELP baton_lock_waiting Lock, Acquire and Campaign calls waiting now, by primitive.
# TYPE baton_lock_waiting gauge
baton_lock_waiting{primitive="lock"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestGauges follows the held and waiting gauges through a lock's life.
func TestGauges(t *testing.T) {
	c := newCollector(t, batonprom.Options{})
	ctx := context.Background()
	f := func() figures { return gather(t, c) }
	lock := labels{"primitive": "lock"}
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free})
	c.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"})
	c.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"})
	if h, w := f().value(t, "baton_lock_held", lock), f().value(t, "baton_lock_waiting", lock); h != 1 || w != 2 {
		t.Errorf("held %v waiting %v, want 1 and 2", h, w)
	}
	c.Observe(ctx, baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a"})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Granted, Queued: true})
	c.Observe(ctx, baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "a", Queued: true, Err: baton.ErrClosed})
	if h, w := f().value(t, "baton_lock_held", lock), f().value(t, "baton_lock_waiting", lock); h != 1 || w != 0 {
		t.Errorf("held %v waiting %v, want 1 and 0", h, w)
	}
	c.Observe(ctx, baton.Event{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "a", Err: baton.ErrLockLost})
	if h := f().value(t, "baton_lock_held", lock); h != 0 {
		t.Errorf("held %v after the loss, want 0", h)
	}
}

func TestGaveUpReason(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"deadline with last redis error", fmt.Errorf("baton: %w; last error: %w", context.DeadlineExceeded, errors.New("READONLY")), "timeout"},
		{"canceled", fmt.Errorf("baton: %q: %w", "n", context.Canceled), "canceled"},
		{"closed", fmt.Errorf("baton: %q: %w", "n", baton.ErrClosed), "closed"},
		{"redis error", errors.New("ERR unknown command"), "error"},
		{"nil", nil, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := newCollector(t, batonprom.Options{})
			col.Observe(context.Background(), baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "n", Queued: true, Wait: time.Second, Err: c.err})
			f := gather(t, col)
			if got := f.value(t, "baton_lock_gave_up_total", labels{"primitive": "lock", "reason": c.want}); got != 1 {
				t.Errorf("gave_up{reason=%s} = %v, want 1", c.want, got)
			}
			if got := f.total("baton_lock_gave_up_total"); got != 1 {
				t.Errorf("gave_up in all = %v, want 1", got)
			}
			if n, _ := f.hist(t, "baton_lock_wait_seconds", labels{"primitive": "lock", "outcome": c.want}); n != 1 {
				t.Errorf("wait{outcome=%s} count = %d, want 1", c.want, n)
			}
		})
	}
}

// TestNameLabel checks the name label on every metric about a lock, and
// ConstLabels on every series.
func TestNameLabel(t *testing.T) {
	kind := func(name string) string { k, _, _ := strings.Cut(name, ":"); return k }
	c := newCollector(t, batonprom.Options{NameLabel: kind, ConstLabels: prometheus.Labels{"client": "c1"}})
	ctx := context.Background()
	for _, n := range []string{"order:1", "order:2", "user:7"} {
		c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: n, How: baton.Free})
	}
	c.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "order:3"})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveElection, Name: "order:leader", How: baton.Free})
	c.Observe(ctx, baton.Event{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "user:7", Held: time.Millisecond, Err: baton.ErrLockLost})
	c.Observe(ctx, baton.Event{Kind: baton.RenewalFailed, Err: errors.New("x")})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "bad\xffutf8:1", How: baton.Free})
	f := gather(t, c)
	for _, x := range []struct {
		metric string
		labels labels
		want   float64
	}{
		{"baton_lock_acquisitions_total", labels{"client": "c1", "primitive": "lock", "how": "free", "name": "order"}, 2},
		{"baton_lock_acquisitions_total", labels{"client": "c1", "primitive": "lock", "how": "free", "name": "user"}, 1},
		{"baton_lock_acquisitions_total", labels{"client": "c1", "primitive": "lock", "how": "free", "name": "bad\uFFFDutf8"}, 1},
		{"baton_lock_held", labels{"client": "c1", "primitive": "lock", "name": "order"}, 2},
		{"baton_lock_held", labels{"client": "c1", "primitive": "election", "name": "order"}, 1},
		{"baton_lock_held", labels{"client": "c1", "primitive": "lock", "name": "user"}, 0},
		{"baton_lock_waiting", labels{"client": "c1", "primitive": "lock", "name": "order"}, 1},
		{"baton_lock_losses_total", labels{"client": "c1", "primitive": "lock", "name": "user"}, 1},
		{"baton_lock_renewal_errors_total", labels{"client": "c1"}, 1},
	} {
		if got := f.value(t, x.metric, x.labels); got != x.want {
			t.Errorf("%s%v = %v, want %v", x.metric, x.labels, got, x.want)
		}
	}
	if n, _ := f.hist(t, "baton_lock_hold_seconds", labels{"client": "c1", "primitive": "lock", "end": "lost", "name": "user"}); n != 1 {
		t.Errorf("hold{end=lost,name=user} count = %d, want 1", n)
	}
	for metric, ms := range f {
		for _, m := range ms {
			for _, lp := range m.Label {
				if strings.Contains(lp.GetValue(), ":") {
					t.Errorf("%s has a raw name in %s=%q", metric, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

func TestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  batonprom.Options
		want string
	}{
		{"decreasing buckets", batonprom.Options{Buckets: []float64{1, 0.5}}, "Buckets"},
		{"repeated bucket", batonprom.Options{Buckets: []float64{1, 1}}, "Buckets"},
		{"empty buckets", batonprom.Options{Buckets: []float64{}}, "Buckets"},
		{"le", batonprom.Options{ConstLabels: prometheus.Labels{"le": "x"}}, `"le"`},
		{"taken label", batonprom.Options{ConstLabels: prometheus.Labels{"how": "x"}}, "how"},
		{"primitive", batonprom.Options{ConstLabels: prometheus.Labels{"primitive": "x"}}, "primitive"},
		{"name with NameLabel", batonprom.Options{NameLabel: strings.ToLower, ConstLabels: prometheus.Labels{"name": "x"}}, "name"},
		{"invalid label", batonprom.Options{ConstLabels: prometheus.Labels{"__x": "y"}}, "__x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := batonprom.New(c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "batonprom: ") {
				t.Errorf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
	if _, err := batonprom.New(batonprom.Options{ConstLabels: prometheus.Labels{"name": "x"}}); err != nil {
		t.Errorf("ConstLabels name without NameLabel: %v", err)
	}
}

// TestTwoCollectorsOneRegistry: Collectors of two Clients register side by
// side when their ConstLabels differ, and not otherwise.
func TestTwoCollectorsOneRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := newCollector(t, batonprom.Options{ConstLabels: prometheus.Labels{"client": "a"}})
	b := newCollector(t, batonprom.Options{ConstLabels: prometheus.Labels{"client": "b"}})
	if err := reg.Register(a); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(b); err != nil {
		t.Fatalf("second Collector with other ConstLabels: %v", err)
	}
	if err := reg.Register(newCollector(t, batonprom.Options{ConstLabels: prometheus.Labels{"client": "a"}})); err == nil {
		t.Error("a third Collector with the same ConstLabels registered")
	}
	b.Observe(context.Background(), baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "x", How: baton.Free})
	if n, err := testutil.GatherAndCount(reg, "baton_lock_held"); err != nil || n != 2 {
		t.Errorf("baton_lock_held series: %d, %v; want 2", n, err)
	}
	const want = `
# HELP baton_lock_held Locks, permits and leaderships held now, by primitive.
# TYPE baton_lock_held gauge
baton_lock_held{client="a",primitive="lock"} 0
baton_lock_held{client="b",primitive="lock"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_lock_held"); err != nil {
		t.Error(err)
	}
}

// TestConcurrentObserve has goroutines observe whole lock lives at once,
// two for each name and primitive: the counts must add up (and -race must
// stay quiet).
func TestConcurrentObserve(t *testing.T) {
	const goroutines, rounds = 12, 500
	prims := []baton.Primitive{baton.PrimitiveLock, baton.PrimitiveSemaphore, baton.PrimitiveElection}
	c := newCollector(t, batonprom.Options{NameLabel: func(n string) string { return n }})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			// New labels and new primitives of a label racing.
			n, p := fmt.Sprint("n", g%2), prims[g/2%3]
			for range rounds {
				c.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: p, Name: n})
				c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: p, Name: n, How: baton.Granted, Queued: true, Wait: time.Millisecond})
				c.Observe(ctx, baton.Event{Kind: baton.Released, Primitive: p, Name: n, Held: time.Millisecond})
			}
		})
	}
	wg.Wait()
	f := gather(t, c)
	if got := f.total("baton_lock_acquisitions_total"); got != goroutines*rounds {
		t.Errorf("acquisitions = %v, want %d", got, goroutines*rounds)
	}
	for g := range 2 {
		for _, p := range prims {
			l := func(kv ...string) labels {
				m := labels{"name": fmt.Sprint("n", g), "primitive": p.String()}
				for i := 0; i < len(kv); i += 2 {
					m[kv[i]] = kv[i+1]
				}
				return m
			}
			if got := f.value(t, "baton_lock_acquisitions_total", l("how", "granted")); got != 2*rounds {
				t.Errorf("acquisitions%v = %v, want %d", l(), got, 2*rounds)
			}
			if h, w := f.value(t, "baton_lock_held", l()), f.value(t, "baton_lock_waiting", l()); h != 0 || w != 0 {
				t.Errorf("held%v = %v, waiting = %v, want 0 and 0", l(), h, w)
			}
			if cnt, sum := f.hist(t, "baton_lock_wait_seconds", l("outcome", "acquired")); cnt != 2*rounds || math.Abs(sum-2*rounds*0.001) > 1e-6 {
				t.Errorf("wait%v: count %d sum %v, want %d and %v", l(), cnt, sum, 2*rounds, 2*rounds*0.001)
			}
		}
	}
}

// TestObserveAllocs: counting the two events of an uncontended lock does
// not allocate.
func TestObserveAllocs(t *testing.T) {
	c := newCollector(t, batonprom.Options{NameLabel: func(string) string { return "k" }})
	ctx := context.Background()
	acq := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Wait: time.Millisecond}
	rel := baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Held: time.Millisecond}
	allocs := testing.AllocsPerRun(1000, func() {
		c.Observe(ctx, acq)
		c.Observe(ctx, rel)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Acquired+Released, want 0", allocs)
	}
}
