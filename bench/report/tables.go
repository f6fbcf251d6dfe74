package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/batonlock/baton/bench/workload"
)

// HoldingTable writes the holding scenario's tables: footprint, then the
// load per renewal tick.
func HoldingTable(w io.Writer, hs []workload.HoldingMetrics) {
	fmt.Fprintln(w, "| library | locks held | acquire s | goroutines/lock | heap B/lock | Redis cmds/s | cmds/s per lock | Redis CPU | keys before/after hold/after release | unlock s | goroutines left after Close |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var notes []string
	for _, h := range hs {
		fmt.Fprintf(w, "| %s | %d/%d | %s | %s | %s | %s | %s | %s | %d/%d/%d | %s | %d |\n",
			h.Library, h.Acquired, h.Locks, num(h.AcquireSeconds, 2),
			num(float64(h.GoroutinesPerLock), 2), num(float64(h.HeapBytesPerLock), 0),
			num(float64(h.CmdsPerSec), 0), num(float64(h.CmdsPerLockS), 2),
			pctCore(float64(h.CPUPerSec)), h.KeysBefore, h.KeysAfter, h.KeysReleased, num(h.UnlockSeconds, 2), h.GoroutineLeak)
		if h.Error != "" {
			notes = append(notes, fmt.Sprintf("**%s**: %s", h.Library, h.Error))
		}
		if h.AcquireTimedOut {
			notes = append(notes, fmt.Sprintf("**%s**: acquiring timed out", h.Library))
		}
		if h.UnlockTimedOut {
			notes = append(notes, fmt.Sprintf("**%s**: releasing timed out", h.Library))
		}
		for _, e := range sortedCounts(h.LockErrors) {
			notes = append(notes, fmt.Sprintf("**%s**: Lock error x%d: %s", h.Library, e.n, e.k))
		}
		for _, e := range sortedCounts(h.UnlockErrors) {
			notes = append(notes, fmt.Sprintf("**%s**: Unlock error x%d: %s", h.Library, e.n, e.k))
		}
		if h.Handshakes > 0 {
			notes = append(notes, fmt.Sprintf("%s: opened %d connection(s) during the hold (their HELLO handshakes are not counted as round trips)", h.Library, h.Handshakes))
		}
		if h.KeysAfter < int64(h.Acquired) {
			// Fewer keys than held locks (keys of released warm-up locks may
			// expire meanwhile, and do not count).
			notes = append(notes, fmt.Sprintf("**%s**: %d keys after the hold for %d held locks: leases lapsed", h.Library, h.KeysAfter, h.Acquired))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Per renewal tick during the hold, after acquiring (values per node in node order; round trips = socket writes that end a pipelined batch, see README):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| library | nodes holding locks | ticks | round trips/tick per node | round trips/tick | socket writes/tick per node | keep-alive PINGs/tick | scripts/tick per node | scripts/tick | KiB sent/tick | Redis cmds/s per node | Redis CPU per node |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, h := range hs {
		var rt, wr, sc, cs, cpu []string
		for _, n := range h.PerNode {
			rt = append(rt, num(float64(n.RoundTripsPerTick), 2))
			wr = append(wr, num(float64(n.WritesPerTick), 2))
			sc = append(sc, num(float64(n.ScriptsPerTick), 1))
			cs = append(cs, num(float64(n.CmdsPerSec), 0))
			cpu = append(cpu, pctCore(float64(n.CPUPerSec)))
		}
		ticks := num(float64(h.Ticks), 2)
		if h.Bursts > 0 && float64(h.Ticks) == float64(h.Bursts) {
			ticks = fmt.Sprintf("%d seen", h.Bursts)
		}
		fmt.Fprintf(w, "| %s | %d of %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			h.Library, h.NodesWithLocks, h.Nodes, ticks, strings.Join(rt, " / "), num(float64(h.RoundTripsPerTick), 2),
			strings.Join(wr, " / "), num(float64(h.PingsPerTick), 2), strings.Join(sc, " / "), num(float64(h.ScriptsPerTick), 1),
			num(float64(h.BytesPerTick)/1024, 1), strings.Join(cs, " / "), strings.Join(cpu, " / "))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// FailoverTable writes the failover scenario's table: from the end of the
// leader's term (its Unlock call; the SIGKILL of its process) to the next
// leader's Campaign returning and to every Observe reader seeing it.
func FailoverTable(w io.Writer, m workload.FailoverMetrics) {
	if m.SetupError != "" {
		fmt.Fprintf(w, "- **failover**: setup failed: %s\n", m.SetupError)
		return
	}
	fmt.Fprintf(w, "| term ended by | rounds | next Campaign returns p50 | p90 | max | all %d readers saw it p50 | p90 | max | first reader p50 | Unlock call p50 |\n", m.Params.Observers)
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range []struct {
		name string
		st   workload.FailoverStats
	}{{"leader's Unlock", m.Resign}, {fmt.Sprintf("SIGKILL of the leader's process (lease %v)", m.Params.Lease), m.Kill}} {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.st.Rounds,
			dur(r.st.CampaignP50US), dur(r.st.CampaignP90US), dur(r.st.CampaignMaxUS),
			dur(r.st.AllObservedP50US), dur(r.st.AllObservedP90US), dur(r.st.AllObservedMaxUS),
			dur(r.st.FirstObservedP50US), dur(r.st.UnlockP50US))
	}
	var notes []string
	for _, e := range m.Errors {
		notes = append(notes, "**failover**: "+e)
	}
	for _, st := range []workload.FailoverStats{m.Resign, m.Kill} {
		if st.Missing > 0 {
			notes = append(notes, fmt.Sprintf("**failover**: %d reader observations missing (a reader never saw a new leader within the timeout)", st.Missing))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}
