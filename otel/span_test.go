package batonotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// spanAttr returns the value of attribute key of s as a string, or "".
func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func spanSummary(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "[%s %v %v] ", s.Name(), s.Attributes(), s.Status())
	}
	return b.String()
}

func TestSpan(t *testing.T) {
	redisErr := errors.New("ERR something broke")
	for _, c := range []struct {
		name   string
		ev     baton.Event
		attrs  map[string]string // "" means absent
		status codes.Code
		span   string // default batonotel.SpanName
	}{
		{"acquired", baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "jobs", Token: 42, How: baton.Granted, Wait: 1500 * time.Millisecond, Queued: true},
			map[string]string{"baton.lock.primitive": "lock", "baton.lock.name": "jobs", "baton.lock.outcome": "acquired", "baton.lock.token": "42", "baton.lock.how": "granted"}, codes.Unset, ""},
		{"timeout", baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "jobs", Wait: time.Second, Queued: true, Err: context.DeadlineExceeded},
			map[string]string{"baton.lock.name": "jobs", "baton.lock.outcome": "timeout", "baton.lock.token": "", "baton.lock.how": ""}, codes.Unset, ""},
		{"canceled", baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "jobs", Wait: time.Second, Queued: true, Err: context.Canceled},
			map[string]string{"baton.lock.outcome": "canceled"}, codes.Unset, ""},
		{"closed", baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "jobs", Wait: time.Second, Queued: true, Err: baton.ErrClosed},
			map[string]string{"baton.lock.outcome": "closed"}, codes.Unset, ""},
		{"error", baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "jobs", Wait: time.Second, Queued: true, Err: redisErr},
			map[string]string{"baton.lock.outcome": "error", "baton.lock.token": ""}, codes.Error, ""},
		{"permit", baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveSemaphore, Name: "api", Token: 7, How: baton.Granted, Wait: time.Second, Queued: true},
			map[string]string{"baton.lock.primitive": "semaphore", "baton.lock.name": "api", "baton.lock.outcome": "acquired", "baton.lock.how": "granted"},
			codes.Unset, batonotel.SpanNameSemaphore},
		{"leadership", baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveElection, Name: "jobs", Token: 3, How: baton.Granted, Wait: 443700 * time.Millisecond, Queued: true},
			map[string]string{"baton.lock.primitive": "election", "baton.lock.name": "jobs", "baton.lock.outcome": "acquired", "baton.lock.token": "3"},
			codes.Unset, batonotel.SpanNameElection},
		{"campaign cancelled", baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveElection, Name: "jobs", Wait: time.Hour, Queued: true, Err: context.Canceled},
			map[string]string{"baton.lock.primitive": "election", "baton.lock.outcome": "canceled"}, codes.Unset, batonotel.SpanNameElection},
		{"zero primitive", baton.Event{Kind: baton.Acquired, Name: "jobs", Token: 1, How: baton.Granted, Wait: time.Second, Queued: true},
			map[string]string{"baton.lock.primitive": "", "baton.lock.outcome": "acquired"}, codes.Unset, batonotel.SpanName},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, batonotel.Options{})
			ctx, parent := h.tp.Tracer("caller").Start(context.Background(), "handler")
			before := time.Now()
			h.obs.Observe(ctx, c.ev)
			after := time.Now()
			parent.End()

			spans := h.spans.Ended()
			if len(spans) != 2 {
				t.Fatalf("spans: %s, want the caller's and one of baton", spanSummary(spans))
			}
			s := spans[0]
			if c.span == "" {
				c.span = batonotel.SpanName
			}
			if s.Name() != c.span {
				t.Fatalf("first span ended is %q, want %q", s.Name(), c.span)
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("span's parent %v, want the caller's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
			}
			if d := s.EndTime().Sub(s.StartTime()); d != c.ev.Wait {
				t.Errorf("span lasts %v, want the event's Wait %v", d, c.ev.Wait)
			}
			if s.EndTime().Before(before) || s.EndTime().After(after) {
				t.Errorf("span ends at %v, not during Observe [%v, %v]", s.EndTime(), before, after)
			}
			for k, want := range c.attrs {
				if got := spanAttr(s, k); got != want {
					t.Errorf("attribute %s = %q, want %q", k, got, want)
				}
			}
			if s.Status().Code != c.status {
				t.Errorf("status %v, want %v", s.Status(), c.status)
			}
			if c.status == codes.Error {
				if s.Status().Description != redisErr.Error() || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
					t.Errorf("status %v, events %v: want the error as description and an exception event", s.Status(), s.Events())
				}
			}
		})
	}
}

// TestNoSpanWithoutWait: calls that did not queue give no span.
func TestNoSpanWithoutWait(t *testing.T) {
	h := newHarness(t, batonotel.Options{})
	ctx := context.Background()
	h.obs.Observe(ctx, baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "a", How: baton.Free, Wait: time.Millisecond})
	h.obs.Observe(ctx, baton.Event{Kind: baton.GaveUp, Primitive: baton.PrimitiveLock, Name: "a", Wait: time.Millisecond, Err: context.Canceled})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Released, Primitive: baton.PrimitiveLock, Name: "a", Held: time.Millisecond})
	h.obs.Observe(ctx, baton.Event{Kind: baton.Waiting, Primitive: baton.PrimitiveLock, Name: "a"})
	if spans := h.spans.Ended(); len(spans) != 0 {
		t.Errorf("spans %s, want none", spanSummary(spans))
	}
	if started := h.spans.Started(); len(started) != 0 {
		t.Errorf("%d spans left open", len(started))
	}
}

// TestSpanNameLabel: with NameLabel the span carries the label, not the
// name.
func TestSpanNameLabel(t *testing.T) {
	h := newHarness(t, batonotel.Options{NameLabel: func(string) string { return "kind" }})
	h.obs.Observe(context.Background(), baton.Event{Kind: baton.Acquired, Primitive: baton.PrimitiveLock, Name: "secret:1", How: baton.Free, Queued: true})
	spans := h.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("spans %s, want one", spanSummary(spans))
	}
	if got := spanAttr(spans[0], "baton.lock.name"); got != "kind" {
		t.Errorf("baton.lock.name = %q, want the label %q", got, "kind")
	}
	if n := len(spans[0].Attributes()); n != 5 {
		t.Errorf("%d attributes %v, want primitive, name, outcome, token, how", n, spans[0].Attributes())
	}
}
