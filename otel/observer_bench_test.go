package batonotel_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	batonotel "github.com/batonlock/baton/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// benchObservers are the sub-benchmarks: no Observer, and an Observer on
// the SDK (metrics aggregated by a ManualReader that is never read, spans
// batched to an exporter that drops them).
func benchObservers(b *testing.B) []struct {
	name string
	obs  func(b *testing.B) baton.Observer
} {
	return []struct {
		name string
		obs  func(b *testing.B) baton.Observer
	}{
		{"nil-observer", func(*testing.B) baton.Observer { return nil }},
		{"otel", func(b *testing.B) baton.Observer {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			obs, err := batonotel.New(batonotel.Options{
				MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
				TracerProvider: tp,
			})
			if err != nil {
				b.Fatal(err)
			}
			return obs
		}},
	}
}

func benchClient(b *testing.B, srv *redistest.Server, obs baton.Observer) *baton.Client {
	b.Helper()
	c, err := baton.New(baton.Options{Redis: srv.Option(), Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkLockUnlock is an uncontended Lock and Unlock of one name by one
// client: two Redis round trips and, with the Observer, an Acquired and a
// Released event.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, bm := range benchObservers(b) {
		b.Run(bm.name, func(b *testing.B) {
			c := benchClient(b, srv, bm.obs(b))
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Lock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLockUnlockContended has 4 goroutines of one client take turns
// on one name; most Lock calls wait (a Waiting event and a span each, with
// the Observer). ns/op is per Lock and Unlock.
func BenchmarkLockUnlockContended(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, bm := range benchObservers(b) {
		b.Run(bm.name, func(b *testing.B) {
			c := benchClient(b, srv, bm.obs(b))
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						l, err := c.Lock(ctx, "bench")
						if err != nil {
							b.Error(err)
							return
						}
						if err := l.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// BenchmarkObserve is the Observer alone on the SDK, without Redis: the
// events of an uncontended lock (Acquired, Released), and of one that
// waited (Waiting, Acquired with a span, Released).
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	acq := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Wait: 50 * time.Microsecond}
	rel := baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Held: time.Millisecond}
	waiting := baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"}
	granted := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Granted, Wait: time.Millisecond, Queued: true, Token: 1 << 20}
	obs := benchObservers(b)[1].obs(b)
	b.Run("uncontended", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(ctx, acq)
			obs.Observe(ctx, rel)
		}
	})
	b.Run("waited", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(ctx, waiting)
			obs.Observe(ctx, granted)
			obs.Observe(ctx, rel)
		}
	})
}
