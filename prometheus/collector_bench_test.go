package batonprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonprom "github.com/batonlock/baton/prometheus"
)

// BenchmarkObserve is the Collector alone, without Redis: the events of an
// uncontended lock (Acquired, Released), and of one that waited (Waiting,
// Acquired, Released).
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	acq := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Wait: 50 * time.Microsecond}
	rel := baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Held: time.Millisecond}
	waiting := baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"}
	granted := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Granted, Wait: time.Millisecond, Queued: true}
	for _, bm := range []struct {
		name string
		opt  batonprom.Options
	}{
		{"plain", batonprom.Options{}},
		{"name-label", batonprom.Options{NameLabel: func(string) string { return "k" }}},
	} {
		c := newCollector(b, bm.opt)
		b.Run(bm.name+"/uncontended", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Observe(ctx, acq)
				c.Observe(ctx, rel)
			}
		})
		b.Run(bm.name+"/waited", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Observe(ctx, waiting)
				c.Observe(ctx, granted)
				c.Observe(ctx, rel)
			}
		})
	}
}
