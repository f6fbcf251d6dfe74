package batonprom_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/batonlock/baton"
	batonprom "github.com/batonlock/baton/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/rueidis"
)

// A Client whose figures are served on /metrics.
func ExampleNew() {
	col, err := batonprom.New(batonprom.Options{})
	if err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(col)
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
		Observer: col,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	http.Handle("/metrics", promhttp.Handler())
}

// NameLabel adds a bounded label: here the kind of the lock, the part of
// its name before ':'. ConstLabels tell Clients apart in one registry.
func ExampleOptions_nameLabel() {
	col, err := batonprom.New(batonprom.Options{
		NameLabel: func(name string) string {
			kind, _, _ := strings.Cut(name, ":")
			return kind
		},
		ConstLabels: prometheus.Labels{"client": "billing"},
	})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	// The events a Client would send for two locks and a leadership.
	ctx := context.Background()
	col.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "invoice:17", How: baton.Free})
	col.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "invoice:18", How: baton.Free})
	col.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveElection, Name: "invoice:billing-run", How: baton.Free})

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "baton_lock_held" {
			expfmt.MetricFamilyToText(os.Stdout, mf)
		}
	}
	// Output:
	// # HELP baton_lock_held Locks, permits and leaderships held now, by primitive.
	// # TYPE baton_lock_held gauge
	// baton_lock_held{client="billing",name="invoice",primitive="election"} 1
	// baton_lock_held{client="billing",name="invoice",primitive="lock"} 2
}
