package batonprom_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/observertest"
	batonprom "github.com/batonlock/baton/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWorkload runs the scripted workload through real clients on a real
// Redis, each with its own Collector in one registry, and checks that every
// figure of every primitive matches what the script did, at its moments
// and at the end, and what the clients' Stats say.
func TestWorkload(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var cols [2]*batonprom.Collector
	for i := range cols {
		cols[i] = newCollector(t, batonprom.Options{ConstLabels: prometheus.Labels{"client": strconv.Itoa(i + 1)}})
		if err := reg.Register(cols[i]); err != nil {
			t.Fatal(err)
		}
	}
	moments := 0
	at := func(m observertest.Moment) {
		t.Helper()
		moments++
		for i, col := range cols {
			f := gather(t, col)
			for _, p := range observertest.Primitives {
				l := labels{"client": strconv.Itoa(i + 1), "primitive": p.String()}
				// A primitive's series exist from its first event: before,
				// the gauges are 0.
				gauge := func(metric string) float64 { return f.find(metric, l).GetGauge().GetValue() }
				if got, want := gauge("baton_lock_held"), m.Held[i][p]; got != float64(want) {
					t.Errorf("%s: %s = %v, want %d", m.What, show("baton_lock_held", l), got, want)
				}
				if got, want := gauge("baton_lock_waiting"), m.Waiting[i][p]; got != float64(want) {
					t.Errorf("%s: %s = %v, want %d", m.What, show("baton_lock_waiting", l), got, want)
				}
			}
			checkPrimitiveLabels(t, f)
		}
	}
	w := observertest.Run(t, context.Background(), [2]baton.Observer{cols[0], cols[1]}, 20, at)
	if moments != 5 {
		t.Errorf("%d moments, want 5", moments)
	}

	for i, col := range cols {
		f, st := gather(t, col), w.Stats[i]
		cl := strconv.Itoa(i + 1)
		t.Run("client"+cl, func(t *testing.T) {
			checkPrimitiveLabels(t, f)
			for _, p := range observertest.Primitives {
				checkFigures(t, f, cl, p, w.Figures[i][p])
			}
			eq := func(what string, got, want float64) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			eq("acquisitions vs Stats.Acquired", f.total("baton_lock_acquisitions_total"), float64(st.Acquired))
			eq("acquisitions vs the calls' count", f.total("baton_lock_acquisitions_total"), float64(w.Acquired[i]))
			eq("hold_seconds count vs Stats.Acquired", float64(f.histCount("baton_lock_hold_seconds")), float64(st.Acquired))
			eq("losses vs Stats.Lost", f.total("baton_lock_losses_total"), float64(st.Lost))
			eq("renewal errors", f.value(t, "baton_lock_renewal_errors_total", labels{"client": cl}), float64(st.RenewalErrors))
			eq("wait_seconds count vs Waiting events", float64(f.histCount("baton_lock_wait_seconds")), float64(w.Waits[i]))
			if _, sum := f.hist(t, "baton_lock_wait_seconds", labels{"client": cl, "primitive": "lock", "outcome": "acquired"}); sum <= 0 {
				t.Errorf("wait_seconds{lock,acquired} sum is 0 after %d waits", w.Figures[i][baton.PrimitiveLock].Waits["acquired"])
			}
		})
	}
	if g := w.Figures[1][baton.PrimitiveLock].Acquired["granted"]; g < 1 {
		t.Errorf("client 2 acquired %d locks by grant, want at least the scripted one", g)
	}

	// What the script did on purpose, through the registry.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(scripted), "baton_lock_gave_up_total", "baton_lock_held",
		"baton_lock_losses_total", "baton_lock_renewal_errors_total", "baton_lock_waiting"); err != nil {
		t.Error(err)
	}
}

// scripted is what the script did on purpose, as the registry of TestWorkload
// shows it.
const scripted = `
# HELP baton_lock_gave_up_total Lock, Acquire and Campaign calls that returned without the lock, permit or leadership, by primitive and reason.
# TYPE baton_lock_gave_up_total counter
baton_lock_gave_up_total{client="1",primitive="election",reason="canceled"} 0
baton_lock_gave_up_total{client="1",primitive="election",reason="closed"} 0
baton_lock_gave_up_total{client="1",primitive="election",reason="error"} 0
baton_lock_gave_up_total{client="1",primitive="election",reason="timeout"} 0
baton_lock_gave_up_total{client="1",primitive="lock",reason="canceled"} 0
baton_lock_gave_up_total{client="1",primitive="lock",reason="closed"} 0
baton_lock_gave_up_total{client="1",primitive="lock",reason="error"} 0
baton_lock_gave_up_total{client="1",primitive="lock",reason="timeout"} 0
baton_lock_gave_up_total{client="1",primitive="rwmutex",reason="canceled"} 0
baton_lock_gave_up_total{client="1",primitive="rwmutex",reason="closed"} 0
baton_lock_gave_up_total{client="1",primitive="rwmutex",reason="error"} 0
baton_lock_gave_up_total{client="1",primitive="rwmutex",reason="timeout"} 0
baton_lock_gave_up_total{client="1",primitive="semaphore",reason="canceled"} 0
baton_lock_gave_up_total{client="1",primitive="semaphore",reason="closed"} 0
baton_lock_gave_up_total{client="1",primitive="semaphore",reason="error"} 0
baton_lock_gave_up_total{client="1",primitive="semaphore",reason="timeout"} 0
baton_lock_gave_up_total{client="2",primitive="election",reason="canceled"} 0
baton_lock_gave_up_total{client="2",primitive="election",reason="closed"} 0
baton_lock_gave_up_total{client="2",primitive="election",reason="error"} 0
baton_lock_gave_up_total{client="2",primitive="election",reason="timeout"} 0
baton_lock_gave_up_total{client="2",primitive="lock",reason="canceled"} 1
baton_lock_gave_up_total{client="2",primitive="lock",reason="closed"} 1
baton_lock_gave_up_total{client="2",primitive="lock",reason="error"} 0
baton_lock_gave_up_total{client="2",primitive="lock",reason="timeout"} 1
baton_lock_gave_up_total{client="2",primitive="rwmutex",reason="canceled"} 1
baton_lock_gave_up_total{client="2",primitive="rwmutex",reason="closed"} 0
baton_lock_gave_up_total{client="2",primitive="rwmutex",reason="error"} 0
baton_lock_gave_up_total{client="2",primitive="rwmutex",reason="timeout"} 0
baton_lock_gave_up_total{client="2",primitive="semaphore",reason="canceled"} 1
baton_lock_gave_up_total{client="2",primitive="semaphore",reason="closed"} 0
baton_lock_gave_up_total{client="2",primitive="semaphore",reason="error"} 0
baton_lock_gave_up_total{client="2",primitive="semaphore",reason="timeout"} 0
# HELP baton_lock_held Locks, permits and leaderships held now, by primitive.
# TYPE baton_lock_held gauge
baton_lock_held{client="1",primitive="election"} 0
baton_lock_held{client="1",primitive="lock"} 0
baton_lock_held{client="1",primitive="rwmutex"} 0
baton_lock_held{client="1",primitive="semaphore"} 0
baton_lock_held{client="2",primitive="election"} 0
baton_lock_held{client="2",primitive="lock"} 0
baton_lock_held{client="2",primitive="rwmutex"} 0
baton_lock_held{client="2",primitive="semaphore"} 0
# HELP baton_lock_losses_total Held locks, permits and leaderships lost before Unlock, by primitive.
# TYPE baton_lock_losses_total counter
baton_lock_losses_total{client="1",primitive="election"} 1
baton_lock_losses_total{client="1",primitive="lock"} 1
baton_lock_losses_total{client="1",primitive="rwmutex"} 0
baton_lock_losses_total{client="1",primitive="semaphore"} 0
baton_lock_losses_total{client="2",primitive="election"} 0
baton_lock_losses_total{client="2",primitive="lock"} 0
baton_lock_losses_total{client="2",primitive="rwmutex"} 0
baton_lock_losses_total{client="2",primitive="semaphore"} 0
# HELP baton_lock_renewal_errors_total Renewal round trips that failed and were retried.
# TYPE baton_lock_renewal_errors_total counter
baton_lock_renewal_errors_total{client="1"} 0
baton_lock_renewal_errors_total{client="2"} 0
# HELP baton_lock_waiting Lock, Acquire and Campaign calls waiting now, by primitive.
# TYPE baton_lock_waiting gauge
baton_lock_waiting{client="1",primitive="election"} 0
baton_lock_waiting{client="1",primitive="lock"} 0
baton_lock_waiting{client="1",primitive="rwmutex"} 0
baton_lock_waiting{client="1",primitive="semaphore"} 0
baton_lock_waiting{client="2",primitive="election"} 0
baton_lock_waiting{client="2",primitive="lock"} 0
baton_lock_waiting{client="2",primitive="rwmutex"} 0
baton_lock_waiting{client="2",primitive="semaphore"} 0
`

// checkFigures checks every series of primitive p of client cl against
// what the script did.
func checkFigures(t *testing.T, f figures, cl string, p baton.Primitive, want observertest.Figures) {
	t.Helper()
	l := func(kv ...string) labels {
		m := labels{"client": cl, "primitive": p.String()}
		for j := 0; j < len(kv); j += 2 {
			m[kv[j]] = kv[j+1]
		}
		return m
	}
	eq := func(metric string, l labels, got float64, want int) {
		t.Helper()
		if got != float64(want) {
			t.Errorf("%s = %v, want %d", show(metric, l), got, want)
		}
	}
	for how, n := range want.Acquired {
		eq("baton_lock_acquisitions_total", l("how", how), f.value(t, "baton_lock_acquisitions_total", l("how", how)), n)
	}
	for reason, n := range want.GaveUp {
		eq("baton_lock_gave_up_total", l("reason", reason), f.value(t, "baton_lock_gave_up_total", l("reason", reason)), n)
	}
	for oc, n := range want.Waits {
		eq("baton_lock_wait_seconds_count", l("outcome", oc), float64(count(f.hist(t, "baton_lock_wait_seconds", l("outcome", oc)))), n)
	}
	for end, n := range want.Ends {
		eq("baton_lock_hold_seconds_count", l("end", end), float64(count(f.hist(t, "baton_lock_hold_seconds", l("end", end)))), n)
	}
	eq("baton_lock_losses_total", l(), f.value(t, "baton_lock_losses_total", l()), want.Ends["lost"])
	eq("baton_lock_held", l(), f.value(t, "baton_lock_held", l()), 0)
	eq("baton_lock_waiting", l(), f.value(t, "baton_lock_waiting", l()), 0)
}

// checkPrimitiveLabels checks that every series about a name has a
// primitive the script used, and the renewal errors none.
func checkPrimitiveLabels(t *testing.T, f figures) {
	t.Helper()
	for metric, ms := range f {
		for _, m := range ms {
			p := labelOf(m.Label, "primitive")
			switch {
			case metric == "baton_lock_renewal_errors_total":
				if p != "" {
					t.Errorf("%s%v has a primitive", metric, m.Label)
				}
			case p != "lock" && p != "semaphore" && p != "election" && p != "rwmutex":
				t.Errorf("%s%v: primitive %q, want lock, semaphore, election or rwmutex", metric, m.Label, p)
			}
		}
	}
}

func count(n uint64, _ float64) uint64 { return n }
