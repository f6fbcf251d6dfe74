package batonotel

import (
	"context"
	"time"

	"github.com/batonlock/baton"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The names of the span of a call that waited: a lock's Lock (also for
// events whose primitive baton does not define), a Semaphore's Acquire, an
// Election's Campaign, an RWMutex's RLock or Lock (baton's events do not
// tell them apart). A span's name is its kind of operation, so that a
// tracing backend that derives latencies from span names keeps a
// follower's hours of Campaign apart from the milliseconds of a Lock.
const (
	SpanName          = "baton.Lock"
	SpanNameSemaphore = "baton.Semaphore.Acquire"
	SpanNameElection  = "baton.Election.Campaign"
	SpanNameRWMutex   = "baton.RWMutex"
)

func spanName(p baton.Primitive) string {
	switch p {
	case baton.PrimitiveSemaphore:
		return SpanNameSemaphore
	case baton.PrimitiveElection:
		return SpanNameElection
	case baton.PrimitiveRWMutex:
		return SpanNameRWMutex
	}
	return SpanName
}

// span records the span of a call that waited and ended now.
func (o *Observer) span(ctx context.Context, ev baton.Event, a *attrSets, oc outcome, now time.Time) {
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, a.prim)
	if len(a.name) > 0 {
		kv = append(kv, a.name...)
	} else {
		kv = append(kv, keyName.String(ev.Name))
	}
	kv = append(kv, keyOutcome.String(outcomeNames[oc]))
	if oc == acquired {
		kv = append(kv, keyToken.Int64(int64(ev.Token)), keyHow.String(baton.How(howIndex(ev.How)).String()))
	}
	_, sp := o.tracer.Start(ctx, a.spanName, trace.WithTimestamp(now.Add(-ev.Wait)), trace.WithAttributes(kv...))
	if oc == failed && ev.Err != nil {
		sp.RecordError(ev.Err, trace.WithTimestamp(now))
		sp.SetStatus(codes.Error, ev.Err.Error())
	}
	sp.End(trace.WithTimestamp(now))
}
