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
// figure matches what it did and what the clients' Stats say.
func TestWorkload(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var cols [2]*batonprom.Collector
	for i := range cols {
		cols[i] = newCollector(t, batonprom.Options{ConstLabels: prometheus.Labels{"client": strconv.Itoa(i + 1)}})
		if err := reg.Register(cols[i]); err != nil {
			t.Fatal(err)
		}
	}
	w := observertest.Run(t, context.Background(), [2]baton.Observer{cols[0], cols[1]}, 20)

	for i, col := range cols {
		f, st := gather(t, col), w.Stats[i]
		cl := strconv.Itoa(i + 1)
		l := func(kv ...string) labels {
			m := labels{"client": cl}
			for j := 0; j < len(kv); j += 2 {
				m[kv[j]] = kv[j+1]
			}
			return m
		}
		t.Run("client"+cl, func(t *testing.T) {
			eq := func(what string, got, want float64) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			eq("acquisitions", f.total("baton_lock_acquisitions_total"), float64(w.Acquired[i]))
			eq("acquisitions vs Stats.Acquired", f.total("baton_lock_acquisitions_total"), float64(st.Acquired))
			eq("acquisitions{how=handoff}", f.value(t, "baton_lock_acquisitions_total", l("how", "handoff")), float64(st.LocalHandoffs))
			eq("acquisitions{how=granted}", f.value(t, "baton_lock_acquisitions_total", l("how", "granted")), float64(st.Granted))
			eq("acquisitions{how=free}", f.value(t, "baton_lock_acquisitions_total", l("how", "free")), float64(st.Acquired-st.LocalHandoffs-st.Granted))
			eq("hold_seconds count", float64(f.histCount("baton_lock_hold_seconds")), float64(st.Acquired))
			eq("losses", f.value(t, "baton_lock_losses_total", l()), float64(st.Lost))
			eq("renewal errors", f.value(t, "baton_lock_renewal_errors_total", l()), float64(st.RenewalErrors))
			eq("held after Close", f.value(t, "baton_lock_held", l()), 0)
			eq("waiting at the end", f.value(t, "baton_lock_waiting", l()), 0)
			eq("wait_seconds count", float64(f.histCount("baton_lock_wait_seconds")), float64(w.Waits[i]))
			eq("gave_up{timeout}+{canceled} vs Stats.Timeouts",
				f.value(t, "baton_lock_gave_up_total", l("reason", "timeout"))+f.value(t, "baton_lock_gave_up_total", l("reason", "canceled")), float64(st.Timeouts))
			eq("gave_up{error}", f.value(t, "baton_lock_gave_up_total", l("reason", "error")), 0)
			if _, sum := f.hist(t, "baton_lock_wait_seconds", l("outcome", "acquired")); w.Waits[i] > 0 && sum <= 0 {
				t.Errorf("wait_seconds{outcome=acquired} sum is 0 after %d waits", w.Waits[i])
			}
		})
	}

	// What the script did on purpose, through the registry.
	const want = `
# HELP baton_lock_gave_up_total Lock calls that returned without the lock, by reason.
# TYPE baton_lock_gave_up_total counter
baton_lock_gave_up_total{client="1",reason="canceled"} 0
baton_lock_gave_up_total{client="1",reason="closed"} 0
baton_lock_gave_up_total{client="1",reason="error"} 0
baton_lock_gave_up_total{client="1",reason="timeout"} 0
baton_lock_gave_up_total{client="2",reason="canceled"} 1
baton_lock_gave_up_total{client="2",reason="closed"} 1
baton_lock_gave_up_total{client="2",reason="error"} 0
baton_lock_gave_up_total{client="2",reason="timeout"} 1
# HELP baton_lock_held Locks held now.
# TYPE baton_lock_held gauge
baton_lock_held{client="1"} 0
baton_lock_held{client="2"} 0
# HELP baton_lock_losses_total Held locks lost before Unlock.
# TYPE baton_lock_losses_total counter
baton_lock_losses_total{client="1"} 1
baton_lock_losses_total{client="2"} 0
# HELP baton_lock_waiting Lock calls waiting for a busy lock now.
# TYPE baton_lock_waiting gauge
baton_lock_waiting{client="1"} 0
baton_lock_waiting{client="2"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"baton_lock_gave_up_total", "baton_lock_held", "baton_lock_losses_total", "baton_lock_waiting"); err != nil {
		t.Error(err)
	}
	f1, f2 := gather(t, cols[0]), gather(t, cols[1])
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"client 1 hold{end=lost}", count(f1.hist(t, "baton_lock_hold_seconds", labels{"client": "1", "end": "lost"})), 1},
		{"client 2 hold{end=closed}", count(f2.hist(t, "baton_lock_hold_seconds", labels{"client": "2", "end": "closed"})), 1},
		{"client 2 wait{outcome=timeout}", count(f2.hist(t, "baton_lock_wait_seconds", labels{"client": "2", "outcome": "timeout"})), 1},
		{"client 2 wait{outcome=canceled}", count(f2.hist(t, "baton_lock_wait_seconds", labels{"client": "2", "outcome": "canceled"})), 1},
		{"client 2 wait{outcome=closed}", count(f2.hist(t, "baton_lock_wait_seconds", labels{"client": "2", "outcome": "closed"})), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if g := f2.value(t, "baton_lock_acquisitions_total", labels{"client": "2", "how": "granted"}); g < 1 {
		t.Error("client 2 acquisitions{how=granted} = 0 after a grant")
	}
}

func count(n uint64, _ float64) uint64 { return n }
