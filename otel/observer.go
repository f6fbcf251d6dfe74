package batonotel

import (
	"context"
	"errors"
	"time"

	"github.com/batonlock/baton"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the Meter and Tracer an
// Observer gets from its providers.
const ScopeName = "github.com/batonlock/baton/otel"

// Options configure an Observer. The zero value selects every default.
type Options struct {
	// MeterProvider creates the instruments. Default otel.GetMeterProvider()
	// as New finds it (the global provider forwards to one set later with
	// otel.SetMeterProvider).
	MeterProvider metric.MeterProvider

	// TracerProvider creates the spans. Default otel.GetTracerProvider() as
	// New finds it.
	TracerProvider trace.TracerProvider

	// NameLabel, if set, maps a name (of a lock, a semaphore, an election
	// or a read-write lock) to the value of the attribute baton.lock.name,
	// which is then
	// added to every measurement about a name and replaces the name in
	// spans. Its results must be few (a name's kind, not the name): each
	// distinct value is a series of every instrument per primitive, kept as
	// long as the Observer. It must be safe for concurrent use. Default nil:
	// metrics carry no name, and spans carry the name itself (a span is one
	// call, not a series).
	NameLabel func(name string) string
}

// Observer records a Client's events (of locks, semaphore permits,
// election leaderships and read-write locks, told apart by the attribute
// baton.lock.primitive) with OpenTelemetry instruments and spans; it
// implements baton.Observer.
// Create it with New; the zero value is not usable. It is safe for
// concurrent use.
//
// Give each Client its own Observer. Instruments are identified by name and
// scope, so Observers on one MeterProvider add to the same series: their
// figures are the sums of their Clients'.
type Observer struct {
	tracer    trace.Tracer
	nameLabel func(string) string
	wait      metric.Float64Histogram
	hold      metric.Float64Histogram
	acquired  metric.Int64Counter
	gaveUp    metric.Int64Counter
	losses    metric.Int64Counter
	renewErrs metric.Int64Counter // no primitive: a renewal serves every name of a session
	held      metric.Int64UpDownCounter
	waiting   metric.Int64UpDownCounter

	plain  *perPrim // the sets without a name, used when nameLabel is nil
	labels labelCache
}

// buckets are the advised histogram boundaries, in seconds: from 100µs (a
// local hand-off) to 5 minutes. A View of the MeterProvider overrides them.
var buckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// New creates the instruments of an Observer. It fails if the
// MeterProvider refuses one of them.
func New(opt Options) (*Observer, error) {
	if opt.MeterProvider == nil {
		opt.MeterProvider = otel.GetMeterProvider()
	}
	if opt.TracerProvider == nil {
		opt.TracerProvider = otel.GetTracerProvider()
	}
	m := opt.MeterProvider.Meter(ScopeName)
	o := &Observer{
		tracer:    opt.TracerProvider.Tracer(ScopeName),
		nameLabel: opt.NameLabel,
		plain:     newPerPrim(nil),
	}
	var errs [8]error
	o.wait, errs[0] = m.Float64Histogram("baton.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Lock, Acquire and Campaign calls waited (those that had to), by primitive and outcome."),
		metric.WithExplicitBucketBoundaries(buckets...))
	o.hold, errs[1] = m.Float64Histogram("baton.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks, permits and leaderships were held, by primitive and how they ended."),
		metric.WithExplicitBucketBoundaries(buckets...))
	o.acquired, errs[2] = m.Int64Counter("baton.lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Locks, permits and leaderships acquired, by primitive and how."))
	o.gaveUp, errs[3] = m.Int64Counter("baton.lock.gave_up", metric.WithUnit("{call}"),
		metric.WithDescription("Lock, Acquire and Campaign calls that returned without the lock, permit or leadership, by primitive and reason."))
	o.losses, errs[4] = m.Int64Counter("baton.lock.losses", metric.WithUnit("{lock}"),
		metric.WithDescription("Held locks, permits and leaderships lost before Unlock, by primitive."))
	o.renewErrs, errs[5] = m.Int64Counter("baton.lock.renewal.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Renewal round trips that failed and were retried."))
	o.held, errs[6] = m.Int64UpDownCounter("baton.lock.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks, permits and leaderships held now, by primitive."))
	o.waiting, errs[7] = m.Int64UpDownCounter("baton.lock.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Lock, Acquire and Campaign calls waiting now, by primitive."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records ev under its primitive (baton.lock.primitive: lock,
// semaphore or election; the renewal errors have none). It implements
// baton.Observer.
//
// Acquired and GaveUp events whose Queued is true (calls that waited) also
// give a span whose parent is the span in ctx (the caller's), which starts
// ev.Wait before the event and ends with it: "baton.Lock" for a lock,
// "baton.Semaphore.Acquire" for a permit, "baton.Election.Campaign" for a
// leadership. Its attributes are baton.lock.primitive, baton.lock.name
// (Options.NameLabel's value if set, else the name), baton.lock.outcome,
// and on acquisition baton.lock.token and baton.lock.how. Its status is
// Error, with the error recorded, only for the outcome error (a Redis
// failure): a timeout, a cancellation or Close ended the call as its
// caller asked, so their status stays Unset and the outcome attribute says
// what happened.
func (o *Observer) Observe(ctx context.Context, ev baton.Event) {
	switch ev.Kind {
	case baton.Waiting:
		o.waiting.Add(ctx, 1, o.sets(ev.Primitive, ev.Name).plainAdd...)
	case baton.Acquired:
		a := o.sets(ev.Primitive, ev.Name)
		o.acquired.Add(ctx, 1, a.how[howIndex(ev.How)]...)
		o.held.Add(ctx, 1, a.plainAdd...)
		if ev.Queued {
			o.endWait(ctx, ev, a, acquired)
		}
	case baton.GaveUp:
		a := o.sets(ev.Primitive, ev.Name)
		oc := outcomeOf(ev.Err)
		o.gaveUp.Add(ctx, 1, a.reason[oc]...)
		if ev.Queued {
			o.endWait(ctx, ev, a, oc)
		}
	case baton.Released:
		a := o.sets(ev.Primitive, ev.Name)
		end := released
		if errors.Is(ev.Err, baton.ErrClosed) {
			end = closedBy
		}
		o.held.Add(ctx, -1, a.plainAdd...)
		o.hold.Record(ctx, ev.Held.Seconds(), a.end[end]...)
	case baton.Lost:
		a := o.sets(ev.Primitive, ev.Name)
		o.losses.Add(ctx, 1, a.plainAdd...)
		o.held.Add(ctx, -1, a.plainAdd...)
		o.hold.Record(ctx, ev.Held.Seconds(), a.end[lost]...)
	case baton.RenewalFailed:
		o.renewErrs.Add(ctx, 1)
	}
}

// endWait records the end of a call that waited: the waiting count,
// the wait histogram and the span.
func (o *Observer) endWait(ctx context.Context, ev baton.Event, a *attrSets, oc outcome) {
	now := time.Now()
	o.waiting.Add(ctx, -1, a.plainAdd...)
	o.wait.Record(ctx, ev.Wait.Seconds(), a.outcome[oc]...)
	o.span(ctx, ev, a, oc, now)
}

// sets returns the attribute sets of primitive p and a name.
func (o *Observer) sets(p baton.Primitive, name string) *attrSets {
	pp := o.plain
	if o.nameLabel != nil {
		pp = o.labels.get(o.nameLabel(name))
	}
	return pp[primIndex(p)]
}
