package batonotel_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/observertest"
	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestWorkload runs the scripted workload through real clients on a real
// Redis and checks that every figure of every primitive matches what the
// script did, at its moments and at the end, and what the clients' Stats
// say.
func TestWorkload(t *testing.T) {
	hs := [2]*harness{newHarness(t, batonotel.Options{}), newHarness(t, batonotel.Options{})}
	ctx, root := hs[1].tp.Tracer("test").Start(context.Background(), "caller")
	moments := 0
	at := func(mo observertest.Moment) {
		t.Helper()
		moments++
		for i, h := range hs {
			m := h.collect(t)
			for _, p := range observertest.Primitives {
				kv := prim(p.String())
				if got, want := m.sum(t, "baton.lock.held", kv), mo.Held[i][p]; got != int64(want) {
					t.Errorf("%s: client %d baton.lock.held{%s} = %d, want %d", mo.What, i+1, p, got, want)
				}
				if got, want := m.sum(t, "baton.lock.waiting", kv), mo.Waiting[i][p]; got != int64(want) {
					t.Errorf("%s: client %d baton.lock.waiting{%s} = %d, want %d", mo.What, i+1, p, got, want)
				}
			}
			checkPrimitiveAttrs(t, m)
		}
	}
	w := observertest.Run(t, ctx, [2]baton.Observer{hs[0].obs, hs[1].obs}, 20, at)
	root.End()
	if moments != 5 {
		t.Errorf("%d moments, want 5", moments)
	}

	for i, h := range hs {
		m, st := h.collect(t), w.Stats[i]
		t.Run("client"+strconv.Itoa(i+1), func(t *testing.T) {
			checkPrimitiveAttrs(t, m)
			spans := spanCounts(h.spans.Ended())
			for _, p := range observertest.Primitives {
				f := w.Figures[i][p]
				checkFigures(t, m, p, f)
				waits := 0
				for _, n := range f.Waits {
					waits += n
				}
				if got := spans[spanNames[p]]; got != waits {
					t.Errorf("%d spans %s, want one per call that waited (%s): %d", got, spanNames[p], p, waits)
				}
			}
			eq := func(what string, got, want int64) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %d, want %d", what, got, want)
				}
			}
			eq("acquisitions vs Stats.Acquired", m.total(t, "baton.lock.acquisitions"), int64(st.Acquired))
			eq("acquisitions vs the calls' count", m.total(t, "baton.lock.acquisitions"), int64(w.Acquired[i]))
			eq("losses vs Stats.Lost", m.total(t, "baton.lock.losses"), int64(st.Lost))
			eq("renewal.errors", m.sum(t, "baton.lock.renewal.errors"), int64(st.RenewalErrors))
			eq("spans vs Waiting events", int64(spans[batonotel.SpanName]+spans[batonotel.SpanNameSemaphore]+spans[batonotel.SpanNameElection]+
				spans[batonotel.SpanNameRWMutex]), int64(w.Waits[i]))
			if m.hist(t, "baton.lock.wait.duration", lock, outcome("acquired")).Sum <= 0 {
				t.Errorf("wait.duration{lock,acquired} sum is 0 after %d waits", w.Figures[i][baton.PrimitiveLock].Waits["acquired"])
			}
		})
	}
	if g := w.Figures[1][baton.PrimitiveLock].Acquired["granted"]; g < 1 {
		t.Errorf("client 2 acquired %d locks by grant, want at least the scripted one", g)
	}
	checkScriptedSpans(t, hs[1].spans.Ended(), root.SpanContext().SpanID(), w)
}

var spanNames = map[baton.Primitive]string{
	baton.PrimitiveLock:      batonotel.SpanName,
	baton.PrimitiveSemaphore: batonotel.SpanNameSemaphore,
	baton.PrimitiveElection:  batonotel.SpanNameElection,
	baton.PrimitiveRWMutex:   batonotel.SpanNameRWMutex,
}

// checkFigures checks every series of primitive p against what the script
// did.
func checkFigures(t *testing.T, m metrics, p baton.Primitive, want observertest.Figures) {
	t.Helper()
	pk := prim(p.String())
	eq := func(metric string, kv attribute.KeyValue, got int64, want int) {
		t.Helper()
		if got != int64(want) {
			t.Errorf("%s{%s,%s=%s} = %d, want %d", metric, p, kv.Key, kv.Value.Emit(), got, want)
		}
	}
	for v, n := range want.Acquired {
		eq("baton.lock.acquisitions", how(v), m.sum(t, "baton.lock.acquisitions", pk, how(v)), n)
	}
	for _, v := range []string{"handoff", "cached", "unknown"} {
		if _, can := want.Acquired[v]; !can && p != baton.PrimitiveLock {
			eq("baton.lock.acquisitions", how(v), m.sum(t, "baton.lock.acquisitions", pk, how(v)), 0)
		}
	}
	for v, n := range want.GaveUp {
		eq("baton.lock.gave_up", reason(v), m.sum(t, "baton.lock.gave_up", pk, reason(v)), n)
	}
	for v, n := range want.Waits {
		eq("baton.lock.wait.duration count", outcome(v), int64(m.hist(t, "baton.lock.wait.duration", pk, outcome(v)).Count), n)
	}
	for v, n := range want.Ends {
		eq("baton.lock.hold.duration count", end(v), int64(m.hist(t, "baton.lock.hold.duration", pk, end(v)).Count), n)
	}
	eq("baton.lock.losses", pk, m.sum(t, "baton.lock.losses", pk), want.Ends["lost"])
	eq("baton.lock.held", pk, m.sum(t, "baton.lock.held", pk), 0)
	eq("baton.lock.waiting", pk, m.sum(t, "baton.lock.waiting", pk), 0)
}

// checkPrimitiveAttrs checks that every data point about a name has a
// primitive the script used, and the renewal errors none.
func checkPrimitiveAttrs(t *testing.T, m metrics) {
	t.Helper()
	for n := range m {
		for _, s := range m.attrSetsOf(n) {
			v, ok := s.Value("baton.lock.primitive")
			switch p := v.Emit(); {
			case n == "baton.lock.renewal.errors":
				if ok {
					t.Errorf("%s%v has a primitive", n, s.Encoded(attribute.DefaultEncoder()))
				}
			case p != "lock" && p != "semaphore" && p != "election" && p != "rwmutex":
				t.Errorf("%s{%s}: primitive %q, want lock, semaphore, election or rwmutex", n, s.Encoded(attribute.DefaultEncoder()), p)
			}
		}
	}
}

// checkScriptedSpans checks the spans of client 2's scripted calls: children
// of the caller's span, with the right names and attributes.
func checkScriptedSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, parent trace.SpanID, w observertest.Workload) {
	t.Helper()
	type call struct{ span, outcome string }
	want := map[call]map[string]string{
		{batonotel.SpanName, "acquired"}: {"baton.lock.name": observertest.GrantName, "baton.lock.how": "granted",
			"baton.lock.token": strconv.FormatUint(w.Granted, 10)},
		{batonotel.SpanName, "timeout"}:           {"baton.lock.name": observertest.BusyName, "baton.lock.how": "", "baton.lock.token": ""},
		{batonotel.SpanName, "canceled"}:          {"baton.lock.name": observertest.BusyName},
		{batonotel.SpanName, "closed"}:            {"baton.lock.name": observertest.BusyName},
		{batonotel.SpanNameSemaphore, "acquired"}: {"baton.lock.name": observertest.SemName, "baton.lock.how": "granted"},
		{batonotel.SpanNameSemaphore, "canceled"}: {"baton.lock.name": observertest.SemName},
		{batonotel.SpanNameElection, "acquired"}:  {"baton.lock.name": observertest.ElectName, "baton.lock.how": "granted"},
		{batonotel.SpanNameRWMutex, "acquired"}:   {"baton.lock.name": observertest.RWName, "baton.lock.how": "granted"},
		{batonotel.SpanNameRWMutex, "canceled"}:   {"baton.lock.name": observertest.RWName},
	}
	primOf := map[string]string{batonotel.SpanName: "lock", batonotel.SpanNameSemaphore: "semaphore", batonotel.SpanNameElection: "election",
		batonotel.SpanNameRWMutex: "rwmutex"}
	for _, s := range spans {
		c := call{s.Name(), spanAttr(s, "baton.lock.outcome")}
		attrs, ok := want[c]
		if !ok || s.Parent().SpanID() != parent {
			continue
		}
		delete(want, c)
		attrs["baton.lock.primitive"] = primOf[c.span]
		for k, v := range attrs {
			if got := spanAttr(s, k); got != v {
				t.Errorf("span %s of outcome %s: %s = %q, want %q", c.span, c.outcome, k, got, v)
			}
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("span %s of outcome %s: status %v, want Unset", c.span, c.outcome, s.Status())
		}
		if d := s.EndTime().Sub(s.StartTime()); d <= 0 {
			t.Errorf("span %s of outcome %s lasts %v", c.span, c.outcome, d)
		}
	}
	for c := range want {
		t.Errorf("no span %s of outcome %s under the caller's span", c.span, c.outcome)
	}
}

// spanCounts counts spans by name.
func spanCounts(spans []sdktrace.ReadOnlySpan) map[string]int {
	n := map[string]int{}
	for _, s := range spans {
		n[s.Name()]++
	}
	return n
}
