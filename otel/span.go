package batonotel

import (
	"context"
	"time"

	"github.com/batonlock/baton"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SpanName is the name of the span of a Lock call that waited.
const SpanName = "baton.Lock"

// span records the span of a Lock call that waited and ended now.
func (o *Observer) span(ctx context.Context, ev baton.Event, a *attrSets, oc outcome, now time.Time) {
	kv := make([]attribute.KeyValue, 0, 4)
	if len(a.name) > 0 {
		kv = append(kv, a.name...)
	} else {
		kv = append(kv, keyName.String(ev.Name))
	}
	kv = append(kv, keyOutcome.String(outcomeNames[oc]))
	if oc == acquired {
		kv = append(kv, keyToken.Int64(int64(ev.Token)), keyHow.String(baton.How(howIndex(ev.How)).String()))
	}
	_, sp := o.tracer.Start(ctx, SpanName, trace.WithTimestamp(now.Add(-ev.Wait)), trace.WithAttributes(kv...))
	if oc == failed && ev.Err != nil {
		sp.RecordError(ev.Err, trace.WithTimestamp(now))
		sp.SetStatus(codes.Error, ev.Err.Error())
	}
	sp.End(trace.WithTimestamp(now))
}
