package batonotel_test

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
	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestObserve feeds one event of every kind and checks each instrument,
// with the held and waiting counts along the way.
func TestObserve(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	obs := func(ev baton.Event) { h.obs.Observe(ctx, ev) }

	obs(baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", Token: 1, How: baton.Free, Wait: time.Millisecond})
	obs(baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"})
	obs(baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"})
	m := h.collect(t)
	if got := m.sum(t, "baton.lock.held", lock); got != 1 {
		t.Errorf("held after one acquisition = %d, want 1", got)
	}
	if got := m.sum(t, "baton.lock.waiting", lock); got != 2 {
		t.Errorf("waiting after two Waiting events = %d, want 2", got)
	}

	obs(baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Token: 1, Held: 10 * time.Millisecond})
	obs(baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", Token: 2, How: baton.Granted, Wait: 20 * time.Millisecond, Queued: true})
	obs(baton.Event{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "a", Token: 2, Held: 5 * time.Millisecond, Err: baton.ErrLockLost})
	obs(baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "a", Wait: 30 * time.Millisecond, Queued: true,
		Err: fmt.Errorf("%w (last: %w)", context.DeadlineExceeded, errors.New("LOADING"))})
	obs(baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "b", Err: context.Canceled}) // did not wait
	obs(baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "b", Token: 7, How: baton.Handoff})
	obs(baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "b", Token: 7, Held: time.Second, Err: baton.ErrClosed})
	obs(baton.Event{Kind: baton.RenewalFailed, Err: errors.New("i/o timeout"), Count: 3})
	obs(baton.Event{Kind: baton.RenewalFailed, Err: errors.New("i/o timeout"), Count: 3})
	obs(baton.Event{Kind: baton.Rechecked, Count: 2})
	obs(baton.Event{Kind: 0})   // unknown kinds are ignored
	obs(baton.Event{Kind: 200}) //
	m = h.collect(t)

	for _, c := range []struct {
		name string
		kv   []attribute.KeyValue
		want int64
	}{
		{"baton.lock.acquisitions", []attribute.KeyValue{lock, how("free")}, 1},
		{"baton.lock.acquisitions", []attribute.KeyValue{lock, how("granted")}, 1},
		{"baton.lock.acquisitions", []attribute.KeyValue{lock, how("handoff")}, 1},
		{"baton.lock.gave_up", []attribute.KeyValue{lock, reason("timeout")}, 1},
		{"baton.lock.gave_up", []attribute.KeyValue{lock, reason("canceled")}, 1},
		{"baton.lock.losses", []attribute.KeyValue{lock}, 1},
		{"baton.lock.renewal.errors", nil, 2}, // no primitive: a renewal serves every name
		{"baton.lock.held", []attribute.KeyValue{lock}, 0},
		{"baton.lock.waiting", []attribute.KeyValue{lock}, 0},
	} {
		if got := m.sum(t, c.name, c.kv...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.kv, got, c.want)
		}
	}
	if got := m.total(t, "baton.lock.acquisitions"); got != 3 {
		t.Errorf("acquisitions in all = %d, want 3", got)
	}
	if got := m.total(t, "baton.lock.gave_up"); got != 2 {
		t.Errorf("gave_up in all = %d, want 2", got)
	}
	for _, c := range []struct {
		name string
		kv   attribute.KeyValue
		sum  float64
	}{
		{"baton.lock.wait.duration", outcome("acquired"), 0.020},
		{"baton.lock.wait.duration", outcome("timeout"), 0.030},
		{"baton.lock.hold.duration", end("released"), 0.010},
		{"baton.lock.hold.duration", end("lost"), 0.005},
		{"baton.lock.hold.duration", end("closed"), 1},
	} {
		dp := m.hist(t, c.name, c.kv, lock)
		if dp.Count != 1 || math.Abs(dp.Sum-c.sum) > 1e-9 {
			t.Errorf("%s{%s}: count %d sum %g, want 1 and %g", c.name, c.kv.Value.Emit(), dp.Count, dp.Sum, c.sum)
		}
	}
	// Only the two calls that waited are in the wait histogram.
	hs := m["baton.lock.wait.duration"].Data.(metricdata.Histogram[float64])
	if len(hs.DataPoints) != 2 {
		t.Errorf("wait histogram has %d series, want 2", len(hs.DataPoints))
	}
	for _, s := range m.attrSets() {
		if _, ok := s.Value("baton.lock.name"); ok {
			t.Errorf("attribute set %v names the lock without NameLabel", s.Encoded(attribute.DefaultEncoder()))
		}
	}
}

// TestInstruments checks each instrument's kind, unit and description.
func TestInstruments(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	for _, ev := range []baton.Event{
		{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"},
		{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "a", Queued: true, Err: context.Canceled},
		{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free},
		{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "a", Err: baton.ErrLockLost},
		{Kind: baton.RenewalFailed, Err: errors.New("x")},
	} {
		h.obs.Observe(ctx, ev)
	}
	m := h.collect(t)
	const (
		hist = iota
		counter
		upDown
	)
	for _, c := range []struct {
		name, unit string
		kind       int
	}{
		{"baton.lock.wait.duration", "s", hist},
		{"baton.lock.hold.duration", "s", hist},
		{"baton.lock.acquisitions", "{acquisition}", counter},
		{"baton.lock.gave_up", "{call}", counter},
		{"baton.lock.losses", "{lock}", counter},
		{"baton.lock.renewal.errors", "{error}", counter},
		{"baton.lock.held", "{lock}", upDown},
		{"baton.lock.waiting", "{call}", upDown},
	} {
		x, ok := m[c.name]
		if !ok {
			t.Errorf("%s: not collected", c.name)
			continue
		}
		if x.Unit != c.unit || x.Description == "" {
			t.Errorf("%s: unit %q description %q, want unit %q and a description", c.name, x.Unit, x.Description, c.unit)
		}
		switch d := x.Data.(type) {
		case metricdata.Histogram[float64]:
			if c.kind != hist {
				t.Errorf("%s is a histogram", c.name)
			}
			if b := d.DataPoints[0].Bounds; len(b) == 0 || b[0] > 0.001 {
				t.Errorf("%s: bounds %v do not start below 1ms", c.name, b)
			}
		case metricdata.Sum[int64]:
			if d.IsMonotonic != (c.kind == counter) {
				t.Errorf("%s: monotonic %v", c.name, d.IsMonotonic)
			}
		default:
			t.Errorf("%s: %T", c.name, x.Data)
		}
	}
	if len(m) != 8 {
		t.Errorf("%d instruments collected, want 8", len(m))
	}
}

func TestGaveUpReason(t *testing.T) {
	deadline, cancel := context.WithDeadlineCause(context.Background(), time.Now(), errors.New("too slow"))
	defer cancel()
	<-deadline.Done()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"deadline with cause", deadline.Err(), "timeout"},
		{"deadline with last redis error", fmt.Errorf("baton: %w; last error: %w", context.DeadlineExceeded, errors.New("READONLY")), "timeout"},
		{"canceled", fmt.Errorf("baton: %q: %w", "n", context.Canceled), "canceled"},
		{"closed", fmt.Errorf("baton: %q: %w", "n", baton.ErrClosed), "closed"},
		{"redis error", errors.New("ERR unknown command"), "error"},
		{"not replicated", baton.ErrNotReplicated, "error"},
		{"nil", nil, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, batonotel.Options{})
			h.obs.Observe(context.Background(), baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "n", Queued: true, Err: c.err})
			m := h.collect(t)
			if got := m.sum(t, "baton.lock.gave_up", lock, reason(c.want)); got != 1 {
				t.Errorf("gave_up{reason=%s} = %d, want 1", c.want, got)
			}
			if dp := m.hist(t, "baton.lock.wait.duration", lock, outcome(c.want)); dp.Count != 1 {
				t.Errorf("wait{outcome=%s} count = %d, want 1", c.want, dp.Count)
			}
			if spans := h.spans.Ended(); len(spans) != 1 || spanAttr(spans[0], "baton.lock.outcome") != c.want {
				t.Errorf("spans %v, want one with outcome %s", spanSummary(spans), c.want)
			}
		})
	}
}

// TestNameLabel checks that NameLabel's values become baton.lock.name on
// every measurement about a lock, and on no other.
func TestNameLabel(t *testing.T) {
	kind := func(name string) string { k, _, _ := strings.Cut(name, ":"); return k }
	h := newHarness(t, batonotel.Options{NameLabel: kind})
	ctx := context.Background()
	for _, n := range []string{"order:1", "order:2", "user:7"} {
		h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: n, How: baton.Free})
	}
	h.obs.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "order:1"})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveElection, Name: "order:leader", How: baton.Free})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "order:1", Held: time.Millisecond})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Lost, Primitive: baton.PrimitiveLock, Name: "user:7", Held: time.Millisecond, Err: baton.ErrLockLost})
	h.obs.Observe(ctx, baton.Event{Kind: baton.RenewalFailed, Err: errors.New("x")})
	m := h.collect(t)

	for _, c := range []struct {
		metric string
		kv     []attribute.KeyValue
		want   int64
	}{
		{"baton.lock.acquisitions", []attribute.KeyValue{lock, how("free"), name("order")}, 2},
		{"baton.lock.acquisitions", []attribute.KeyValue{lock, how("free"), name("user")}, 1},
		{"baton.lock.held", []attribute.KeyValue{lock, name("order")}, 1},
		{"baton.lock.held", []attribute.KeyValue{prim("election"), name("order")}, 1},
		{"baton.lock.held", []attribute.KeyValue{lock, name("user")}, 0},
		{"baton.lock.waiting", []attribute.KeyValue{lock, name("order")}, 1},
		{"baton.lock.losses", []attribute.KeyValue{lock, name("user")}, 1},
		{"baton.lock.renewal.errors", nil, 1}, // no name: a renewal serves many
	} {
		if got := m.sum(t, c.metric, c.kv...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.metric, c.kv, got, c.want)
		}
	}
	if dp := m.hist(t, "baton.lock.hold.duration", lock, end("lost"), name("user")); dp.Count != 1 {
		t.Errorf("hold{end=lost,name=user} count = %d, want 1", dp.Count)
	}
	for _, s := range m.attrSets() {
		if v, ok := s.Value("baton.lock.name"); ok && strings.Contains(v.Emit(), ":") {
			t.Errorf("attribute set %v carries a raw name", s.Encoded(attribute.DefaultEncoder()))
		}
	}
}

// TestConcurrentObserve has goroutines observe whole lock lives at once,
// two for each name and primitive: the counts must add up (and -race must
// stay quiet).
func TestConcurrentObserve(t *testing.T) {
	const goroutines, rounds = 12, 500
	prims := []baton.Primitive{baton.PrimitiveLock, baton.PrimitiveSemaphore, baton.PrimitiveElection}
	h := newHarness(t, batonotel.Options{NameLabel: func(n string) string { return n }})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			n, p := fmt.Sprint("n", g%2), prims[g/2%3] // new labels racing
			for i := range rounds {
				h.obs.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: p, Name: n})
				h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: p, Name: n, How: baton.Granted, Queued: true, Token: uint64(i)})
				h.obs.Observe(ctx, baton.Event{Kind: baton.Released, Primitive: p, Name: n, Held: time.Microsecond})
			}
		})
	}
	wg.Wait()
	m := h.collect(t)
	if got := m.total(t, "baton.lock.acquisitions"); got != goroutines*rounds {
		t.Errorf("acquisitions = %d, want %d", got, goroutines*rounds)
	}
	for g := range 2 {
		for _, p := range prims {
			kv := []attribute.KeyValue{name(fmt.Sprint("n", g)), prim(p.String())}
			if got := m.sum(t, "baton.lock.acquisitions", append(kv, how("granted"))...); got != 2*rounds {
				t.Errorf("acquisitions%v = %d, want %d", kv, got, 2*rounds)
			}
			if got, w := m.sum(t, "baton.lock.held", kv...), m.sum(t, "baton.lock.waiting", kv...); got != 0 || w != 0 {
				t.Errorf("held%v = %d, waiting = %d, want 0 and 0", kv, got, w)
			}
			if dp := m.hist(t, "baton.lock.hold.duration", append(kv, end("released"))...); dp.Count != 2*rounds {
				t.Errorf("hold%v count = %d, want %d", kv, dp.Count, 2*rounds)
			}
		}
	}
	if got := len(h.spans.Ended()); got != goroutines*rounds {
		t.Errorf("%d spans, want %d", got, goroutines*rounds)
	}
}

// TestDefaultProviders checks that New without providers uses the global
// ones.
func TestDefaultProviders(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() {
		otel.SetMeterProvider(noop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	obs, err := batonotel.New(batonotel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs.Observe(context.Background(), baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Queued: true})
	h := &harness{reader: reader}
	if got := h.collect(t).sum(t, "baton.lock.acquisitions", lock, how("free")); got != 1 {
		t.Errorf("global provider: acquisitions = %d, want 1", got)
	}
	if got := len(spans.Ended()); got != 1 {
		t.Errorf("global tracer: %d spans, want 1", got)
	}
}

// refusingMeter refuses one instrument.
type refusingMeter struct{ noop.Meter }

func (refusingMeter) Int64UpDownCounter(name string, _ ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	return nil, fmt.Errorf("refused %s", name)
}

type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

func TestNewError(t *testing.T) {
	_, err := batonotel.New(batonotel.Options{MeterProvider: refusingProvider{}})
	if err == nil || !strings.Contains(err.Error(), "refused baton.lock.held") {
		t.Fatalf("New with a refusing meter: %v, want the refusal", err)
	}
}

// TestObserveAllocs pins the cost of an uncontended lock's two events on
// the SDK: recording must not allocate.
func TestObserveAllocs(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	acq := baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Wait: time.Millisecond}
	rel := baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Held: time.Millisecond}
	allocs := testing.AllocsPerRun(1000, func() {
		h.obs.Observe(ctx, acq)
		h.obs.Observe(ctx, rel)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Acquired+Released, want 0", allocs)
	}
}
