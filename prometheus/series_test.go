package batonprom_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonprom "github.com/batonlock/baton/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPrimitives: a leader, a follower, a semaphore's holder and waiter
// and a failover's long wait each count under their own primitive, and
// leave the locks' series at zero.
func TestPrimitives(t *testing.T) {
	c := newCollector(t, batonprom.Options{})
	ctx := context.Background()
	compare := func(what, want string, metrics ...string) {
		t.Helper()
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), metrics...); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	const helpHeld = `
# HELP baton_lock_held Locks, permits and leaderships held now, by primitive.
# TYPE baton_lock_held gauge
`
	const helpWaiting = `
# HELP baton_lock_waiting Lock, Acquire and Campaign calls waiting now, by primitive.
# TYPE baton_lock_waiting gauge
`
	compare("before any event: the locks' series only", helpHeld+`baton_lock_held{primitive="lock"} 0
`, "baton_lock_held")

	el, sem := baton.PrimitiveElection, baton.PrimitiveSemaphore
	for _, ev := range []baton.Event{
		{Kind: baton.Acquired, Primitive: el, Name: "jobs", Token: 1, How: baton.Free}, // the leader
		{Kind: baton.Waiting, Primitive: el, Name: "jobs"},                             // a follower
		{Kind: baton.Acquired, Primitive: sem, Name: "api", Token: 1, How: baton.Free},
		{Kind: baton.Acquired, Primitive: sem, Name: "api", Token: 2, How: baton.Free},
		{Kind: baton.Waiting, Primitive: sem, Name: "api"},
	} {
		c.Observe(ctx, ev)
	}
	compare("a leader, a follower, two permits and a waiter", helpHeld+`baton_lock_held{primitive="election"} 1
baton_lock_held{primitive="lock"} 0
baton_lock_held{primitive="semaphore"} 2
`+helpWaiting+`baton_lock_waiting{primitive="election"} 1
baton_lock_waiting{primitive="lock"} 0
baton_lock_waiting{primitive="semaphore"} 1
`, "baton_lock_held", "baton_lock_waiting")

	// The leader is lost, and the follower leads after a long wait.
	c.Observe(ctx, baton.Event{Kind: baton.Lost, Primitive: el, Name: "jobs", Token: 1, Held: 3 * time.Hour, Err: baton.ErrLockLost})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: el, Name: "jobs", Token: 2, How: baton.Granted, Wait: 443700 * time.Millisecond, Queued: true})
	f := gather(t, c)
	for _, x := range []struct {
		metric string
		labels labels
		want   float64
	}{
		{"baton_lock_held", labels{"primitive": "election"}, 1},
		{"baton_lock_held", labels{"primitive": "lock"}, 0},
		{"baton_lock_waiting", labels{"primitive": "election"}, 0},
		{"baton_lock_losses_total", labels{"primitive": "election"}, 1},
		{"baton_lock_losses_total", labels{"primitive": "lock"}, 0},
		{"baton_lock_acquisitions_total", labels{"primitive": "election", "how": "granted"}, 1},
		{"baton_lock_acquisitions_total", labels{"primitive": "semaphore", "how": "free"}, 2},
		{"baton_lock_acquisitions_total", labels{"primitive": "lock", "how": "free"}, 0},
	} {
		if got := f.value(t, x.metric, x.labels); got != x.want {
			t.Errorf("%s%v = %v, want %v", x.metric, x.labels, got, x.want)
		}
	}
	if n, sum := f.hist(t, "baton_lock_wait_seconds", labels{"primitive": "election", "outcome": "acquired"}); n != 1 || math.Abs(sum-443.7) > 1e-9 {
		t.Errorf("wait{election,acquired}: count %d sum %v, want 1 and 443.7", n, sum)
	}
	if n, _ := f.hist(t, "baton_lock_hold_seconds", labels{"primitive": "election", "end": "lost"}); n != 1 {
		t.Errorf("hold{election,lost} count %d, want 1", n)
	}
	for _, m := range []string{"baton_lock_wait_seconds", "baton_lock_hold_seconds"} {
		for _, s := range f[m] {
			if lp := labelOf(s.Label, "primitive"); lp == "lock" && s.GetHistogram().GetSampleCount() != 0 {
				t.Errorf("%s%v has %d samples: none was of a lock", m, s.Label, s.GetHistogram().GetSampleCount())
			}
		}
	}
}

// TestPrimitiveOutOfRange: an event with the zero Primitive and a name
// (baton sends none) counts under primitive "", one baton does not define
// under "unknown"; events about no name have no primitive label.
func TestPrimitiveOutOfRange(t *testing.T) {
	c := newCollector(t, batonprom.Options{})
	ctx := context.Background()
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Name: "a", How: baton.Free})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: 9, Name: "a", How: baton.Free})
	c.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: 9, Name: "a", How: 200})
	c.Observe(ctx, baton.Event{Kind: baton.RenewalFailed, Err: errors.New("x")})
	f := gather(t, c)
	for _, x := range []struct {
		metric string
		labels labels
		want   float64
	}{
		{"baton_lock_held", labels{"primitive": ""}, 1},
		{"baton_lock_held", labels{"primitive": "unknown"}, 2},
		{"baton_lock_held", labels{"primitive": "lock"}, 0},
		{"baton_lock_acquisitions_total", labels{"primitive": "", "how": "free"}, 1},
		{"baton_lock_acquisitions_total", labels{"primitive": "unknown", "how": "unknown"}, 1},
		{"baton_lock_renewal_errors_total", labels{}, 1},
	} {
		if got := f.value(t, x.metric, x.labels); got != x.want {
			t.Errorf("%s%v = %v, want %v", x.metric, x.labels, got, x.want)
		}
	}
}
