package batonotel_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel/attribute"
)

// TestPrimitives: a leader, a follower, a semaphore's holder and waiter
// and a failover's long wait each count under their own primitive, and
// leave the locks' figures at zero.
func TestPrimitives(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	el, sem := baton.PrimitiveElection, baton.PrimitiveSemaphore
	for _, ev := range []baton.Event{
		{Kind: baton.Acquired, Primitive: el, Name: "jobs", Token: 1, How: baton.Free}, // the leader
		{Kind: baton.Waiting, Primitive: el, Name: "jobs"},                             // a follower
		{Kind: baton.Acquired, Primitive: sem, Name: "api", Token: 1, How: baton.Free},
		{Kind: baton.Acquired, Primitive: sem, Name: "api", Token: 2, How: baton.Free},
		{Kind: baton.Waiting, Primitive: sem, Name: "api"},
	} {
		h.obs.Observe(ctx, ev)
	}
	m := h.collect(t)
	for _, c := range []struct {
		name string
		kv   attribute.KeyValue
		want int64
	}{
		{"baton.lock.held", prim("election"), 1},
		{"baton.lock.held", prim("semaphore"), 2},
		{"baton.lock.held", lock, 0},
		{"baton.lock.waiting", prim("election"), 1},
		{"baton.lock.waiting", prim("semaphore"), 1},
		{"baton.lock.waiting", lock, 0},
	} {
		if got := m.sum(t, c.name, c.kv); got != c.want {
			t.Errorf("a leader, a follower, two permits and a waiter: %s{%s} = %d, want %d", c.name, c.kv.Value.Emit(), got, c.want)
		}
	}

	// The leader is lost, and the follower leads after a long wait.
	h.obs.Observe(ctx, baton.Event{Kind: baton.Lost, Primitive: el, Name: "jobs", Token: 1, Held: 3 * time.Hour, Err: baton.ErrLockLost})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: el, Name: "jobs", Token: 2, How: baton.Granted, Wait: 443700 * time.Millisecond, Queued: true})
	m = h.collect(t)
	for _, c := range []struct {
		name string
		kv   []attribute.KeyValue
		want int64
	}{
		{"baton.lock.held", []attribute.KeyValue{prim("election")}, 1},
		{"baton.lock.waiting", []attribute.KeyValue{prim("election")}, 0},
		{"baton.lock.losses", []attribute.KeyValue{prim("election")}, 1},
		{"baton.lock.losses", []attribute.KeyValue{lock}, 0},
		{"baton.lock.acquisitions", []attribute.KeyValue{prim("election"), how("granted")}, 1},
		{"baton.lock.acquisitions", []attribute.KeyValue{prim("semaphore"), how("free")}, 2},
	} {
		if got := m.sum(t, c.name, c.kv...); got != c.want {
			t.Errorf("after the failover: %s%v = %d, want %d", c.name, c.kv, got, c.want)
		}
	}
	if dp := m.hist(t, "baton.lock.wait.duration", prim("election"), outcome("acquired")); dp.Count != 1 || math.Abs(dp.Sum-443.7) > 1e-9 {
		t.Errorf("wait{election,acquired}: count %d sum %v, want 1 and 443.7", dp.Count, dp.Sum)
	}
	if dp := m.hist(t, "baton.lock.hold.duration", prim("election"), end("lost")); dp.Count != 1 {
		t.Errorf("hold{election,lost} count %d, want 1", dp.Count)
	}
	for _, n := range []string{"baton.lock.wait.duration", "baton.lock.hold.duration", "baton.lock.acquisitions", "baton.lock.losses"} {
		for _, s := range m.attrSetsOf(n) {
			if v, _ := s.Value("baton.lock.primitive"); v.Emit() == "lock" {
				t.Errorf("%s has a data point %v of a lock: there was none", n, s.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
}

// TestPrimitiveOutOfRange: an event with the zero Primitive and a name
// (baton sends none) counts under primitive "", one baton does not define
// under "unknown"; events about no name have no primitive attribute.
func TestPrimitiveOutOfRange(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Name: "a", How: baton.Free})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: 9, Name: "a", How: baton.Free})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: 9, Name: "a", How: 200})
	h.obs.Observe(ctx, baton.Event{Kind: baton.RenewalFailed, Err: errors.New("x")})
	m := h.collect(t)
	for _, c := range []struct {
		name string
		kv   []attribute.KeyValue
		want int64
	}{
		{"baton.lock.held", []attribute.KeyValue{prim("")}, 1},
		{"baton.lock.held", []attribute.KeyValue{prim("unknown")}, 2},
		{"baton.lock.held", []attribute.KeyValue{lock}, 0},
		{"baton.lock.acquisitions", []attribute.KeyValue{prim(""), how("free")}, 1},
		{"baton.lock.acquisitions", []attribute.KeyValue{prim("unknown"), how("unknown")}, 1},
		{"baton.lock.renewal.errors", nil, 1},
	} {
		if got := m.sum(t, c.name, c.kv...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.kv, got, c.want)
		}
	}
}
