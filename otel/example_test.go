package batonotel_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/batonlock/baton"
	batonotel "github.com/batonlock/baton/otel"
	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A Client reporting to the global MeterProvider and TracerProvider (set
// them with otel.SetMeterProvider and otel.SetTracerProvider).
func ExampleNew() {
	obs, err := batonotel.New(batonotel.Options{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
		Observer: obs,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A Lock that waits gives a span "baton.Lock", a child of ctx's span.
	ctx := context.Background()
	l, err := c.Lock(ctx, "report:daily")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
}

// NameLabel adds a bounded attribute: here the kind of the lock, the part
// of its name before ':'. Every measurement about a name also carries its
// primitive.
func ExampleOptions_nameLabel() {
	reader := sdkmetric.NewManualReader()
	obs, err := batonotel.New(batonotel.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		NameLabel: func(name string) string {
			kind, _, _ := strings.Cut(name, ":")
			return kind
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// The events a Client would send for two acquisitions.
	ctx := context.Background()
	obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "invoice:17", How: baton.Free})
	obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "invoice:18", How: baton.Free})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "baton.lock.acquisitions" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				prim, _ := dp.Attributes.Value("baton.lock.primitive")
				name, _ := dp.Attributes.Value("baton.lock.name")
				how, _ := dp.Attributes.Value("baton.lock.how")
				fmt.Printf("%s primitive=%s name=%s how=%s: %d\n", m.Name, prim.AsString(), name.AsString(), how.AsString(), dp.Value)
			}
		}
	}
	// Output:
	// baton.lock.acquisitions primitive=lock name=invoice how=free: 2
}
