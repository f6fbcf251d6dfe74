package report

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/workload"
)

func TestSemaphoreTableShowsViolations(t *testing.T) {
	var b strings.Builder
	Table(&b, []workload.Metrics{
		{Library: "good", Limit: 4, MaxHolders: 4},
		{Library: "bad", Limit: 4, MaxHolders: 6, Overlaps: 17, OverlapsAtomic: 17, OverlapsInterval: 12},
	})
	out := b.String()
	for _, want := range []string{"max holders (limit 4)", "over limit", "| 4 | 0 |", "**6 (VIOLATION)** | **17** |", "17 acquisitions OVER THE LIMIT"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	Table(&b, []workload.Metrics{{Library: "lock"}})
	if strings.Contains(b.String(), "max holders") || !strings.Contains(b.String(), "overlaps |") {
		t.Errorf("lock table:\n%s", b.String())
	}
}

func TestFailoverTable(t *testing.T) {
	ms := int64(time.Millisecond)
	m := workload.FailoverMetrics{Params: workload.FailoverParams{Observers: 2, Rounds: 1, Lease: time.Second},
		Resign: workload.Summarise([]workload.FailoverRound{{Campaign: ms, Observed: []int64{2 * ms, 3 * ms}, Unlock: ms}}),
		Kill:   workload.Summarise([]workload.FailoverRound{{Campaign: 900 * ms, Observed: []int64{901 * ms}, Missing: 1}}),
	}
	var b strings.Builder
	FailoverTable(&b, m)
	out := b.String()
	for _, want := range []string{"| leader's Unlock | 1 | 1.00ms |", "(lease 1s) | 1 | 900.0ms |", "1 reader observations missing"} {
		if !strings.Contains(out, want) {
			t.Errorf("failover table lacks %q:\n%s", want, out)
		}
	}
}
