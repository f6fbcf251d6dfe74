package batonotel_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/observertest"
	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestWorkload runs the scripted workload through real clients on a real
// Redis and checks that every figure matches what it did and what the
// clients' Stats say.
func TestWorkload(t *testing.T) {
	hs := [2]*harness{newHarness(t, batonotel.Options{}), newHarness(t, batonotel.Options{})}
	ctx, root := hs[1].tp.Tracer("test").Start(context.Background(), "caller")
	w := observertest.Run(t, ctx, [2]baton.Observer{hs[0].obs, hs[1].obs}, 20)
	root.End()

	for i, h := range hs {
		m, st := h.collect(t), w.Stats[i]
		t.Run("client"+strconv.Itoa(i+1), func(t *testing.T) {
			eq := func(what string, got, want int64) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %d, want %d", what, got, want)
				}
			}
			// Acquisitions, by how, as the calls got them and as Stats count.
			eq("acquisitions", m.total(t, "baton.lock.acquisitions"), int64(w.Acquired[i]))
			eq("acquisitions vs Stats.Acquired", m.total(t, "baton.lock.acquisitions"), int64(st.Acquired))
			eq("acquisitions{how=handoff}", m.sum(t, "baton.lock.acquisitions", how("handoff")), int64(st.LocalHandoffs))
			eq("acquisitions{how=granted}", m.sum(t, "baton.lock.acquisitions", how("granted")), int64(st.Granted))
			eq("acquisitions{how=free}", m.sum(t, "baton.lock.acquisitions", how("free")), int64(st.Acquired-st.LocalHandoffs-st.Granted))
			// Every lock ended: the hold histogram has them all.
			holds := m.hist(t, "baton.lock.hold.duration", end("released")).Count +
				m.hist(t, "baton.lock.hold.duration", end("closed")).Count +
				m.hist(t, "baton.lock.hold.duration", end("lost")).Count
			eq("hold.duration count", int64(holds), int64(st.Acquired))
			eq("losses", m.sum(t, "baton.lock.losses"), int64(st.Lost))
			eq("renewal.errors", m.sum(t, "baton.lock.renewal.errors"), int64(st.RenewalErrors))
			eq("held after Close", m.sum(t, "baton.lock.held"), 0)
			eq("waiting at the end", m.sum(t, "baton.lock.waiting"), 0)
			// Every call that waited ended once, with a span.
			var waits uint64
			for _, oc := range []string{"acquired", "timeout", "canceled", "closed", "error"} {
				waits += m.hist(t, "baton.lock.wait.duration", outcome(oc)).Count
			}
			eq("wait.duration count", int64(waits), int64(w.Waits[i]))
			eq("baton.Lock spans", int64(countSpans(h.spans.Ended())), int64(w.Waits[i]))
			eq("gave_up{timeout}+{canceled} vs Stats.Timeouts",
				m.sum(t, "baton.lock.gave_up", reason("timeout"))+m.sum(t, "baton.lock.gave_up", reason("canceled")), int64(st.Timeouts))
			eq("gave_up{error}", m.sum(t, "baton.lock.gave_up", reason("error")), 0)
			if w.Waits[i] > 0 && m.hist(t, "baton.lock.wait.duration", outcome("acquired")).Sum <= 0 {
				t.Errorf("wait.duration{outcome=acquired} sum is 0 after %d waits", w.Waits[i])
			}
		})
	}

	// What the script did on purpose.
	m1, m2 := hs[0].collect(t), hs[1].collect(t)
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"client 1 losses", m1.sum(t, "baton.lock.losses"), 1},
		{"client 1 hold{end=lost}", int64(m1.hist(t, "baton.lock.hold.duration", end("lost")).Count), 1},
		{"client 1 gave_up", m1.total(t, "baton.lock.gave_up"), 0},
		{"client 2 losses", m2.sum(t, "baton.lock.losses"), 0},
		{"client 2 gave_up{timeout}", m2.sum(t, "baton.lock.gave_up", reason("timeout")), 1},
		{"client 2 gave_up{canceled}", m2.sum(t, "baton.lock.gave_up", reason("canceled")), 1},
		{"client 2 gave_up{closed}", m2.sum(t, "baton.lock.gave_up", reason("closed")), 1},
		{"client 2 gave_up (the failed TryLock is not one)", m2.total(t, "baton.lock.gave_up"), 3},
		{"client 2 wait{outcome=timeout}", int64(m2.hist(t, "baton.lock.wait.duration", outcome("timeout")).Count), 1},
		{"client 2 wait{outcome=closed}", int64(m2.hist(t, "baton.lock.wait.duration", outcome("closed")).Count), 1},
		{"client 2 hold{end=closed}", int64(m2.hist(t, "baton.lock.hold.duration", end("closed")).Count), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if m2.sum(t, "baton.lock.acquisitions", how("granted")) < 1 {
		t.Error("client 2 acquisitions{how=granted} = 0 after a grant")
	}
	if m1.total(t, "baton.lock.acquisitions") <= 40 || m2.total(t, "baton.lock.acquisitions") <= 40 {
		t.Errorf("acquisitions %d and %d: the workload did not run", m1.total(t, "baton.lock.acquisitions"), m2.total(t, "baton.lock.acquisitions"))
	}

	// The spans of client 2's scripted calls: children of the caller's
	// span, with the right attributes.
	want := map[string]map[string]string{ // outcome: attributes
		"acquired": {"baton.lock.name": observertest.GrantName, "baton.lock.how": "granted", "baton.lock.token": strconv.FormatUint(w.Granted, 10)},
		"timeout":  {"baton.lock.name": observertest.BusyName, "baton.lock.how": "", "baton.lock.token": ""},
		"canceled": {"baton.lock.name": observertest.BusyName},
		"closed":   {"baton.lock.name": observertest.BusyName},
	}
	for _, s := range hs[1].spans.Ended() {
		if s.Name() != batonotel.SpanName || s.Parent().SpanID() != root.SpanContext().SpanID() {
			continue
		}
		oc := spanAttr(s, "baton.lock.outcome")
		attrs, ok := want[oc]
		if !ok {
			continue
		}
		delete(want, oc)
		for k, v := range attrs {
			if got := spanAttr(s, k); got != v {
				t.Errorf("span of outcome %s: %s = %q, want %q", oc, k, got, v)
			}
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("span of outcome %s: status %v, want Unset", oc, s.Status())
		}
		if d := s.EndTime().Sub(s.StartTime()); d <= 0 {
			t.Errorf("span of outcome %s lasts %v", oc, d)
		}
	}
	for oc := range want {
		t.Errorf("no baton.Lock span of outcome %s under the caller's span", oc)
	}
}

func countSpans(spans []sdktrace.ReadOnlySpan) int {
	n := 0
	for _, s := range spans {
		if s.Name() == batonotel.SpanName {
			n++
		}
	}
	return n
}
