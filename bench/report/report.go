// Package report renders benchmark results as Markdown, JSON and charts.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/front"
	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// ScenarioResult is one scenario with every library's line.
type ScenarioResult struct {
	Scenario   workload.Scenario         `json:"scenario"`
	Deployment string                    `json:"deployment,omitempty"`
	Metrics    []workload.Metrics        `json:"results,omitempty"`
	Holding    []workload.HoldingMetrics `json:"holding,omitempty"`
	Failover   *workload.FailoverMetrics `json:"failover,omitempty"`
	Curve      *workload.CurveResult     `json:"curve,omitempty"`
	// Note says what the run left out, and why (a library without the
	// feature the scenario needs).
	Note string `json:"note,omitempty"`
}

// Run is the whole report.
type Run struct {
	Started    time.Time `json:"started"`
	GoVersion  string    `json:"go_version"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	NumCPU     int       `json:"num_cpu"`
	Redis      string    `json:"redis"`
	// Baton is the git state of the baton checkout the run was built from
	// (commit, and the tracked files modified in the work tree).
	Baton string `json:"baton,omitempty"`
	// Deployments describes the Redis deployments the run started/used.
	Deployments []string         `json:"deployments,omitempty"`
	Procs       bool             `json:"procs"`
	Libraries   []string         `json:"libraries"`
	Command     string           `json:"command"`
	Scenarios   []ScenarioResult `json:"scenarios"`
	// ProcsScenarios are the scenarios whose instances ran as processes
	// although Procs is false (presets that always do: Scenario.Procs).
	ProcsScenarios []string `json:"procs_scenarios,omitempty"`
	// Fronts judge baton in each contention scenario it ran in.
	Fronts []front.Verdict `json:"fronts,omitempty"`
	// Seconds is the run's wall time.
	Seconds float64 `json:"seconds,omitempty"`
}

// Header writes the scenario heading.
func Header(w io.Writer, sr ScenarioResult) {
	s := sr.Scenario
	fmt.Fprintf(w, "\n### %s\n\n", s.Name)
	on := ""
	if sr.Deployment != "" {
		on = " On " + sr.Deployment + "."
	}
	if s.Holding != nil {
		h := s.Holding
		fmt.Fprintf(w, "%s: %d locks (rueidislock: %d), lease %v, renewal assumed every %v, held %v.%s\n\n",
			s.About, h.Locks, h.PeerLocks, h.LeaseTTL, h.Renew(), h.HoldFor(), on)
		return
	}
	if f := s.Failover; f != nil {
		if sr.Failover != nil {
			f = &sr.Failover.Params
		}
		fmt.Fprintf(w, "%s: %d candidate processes, %d Observe readers (clients of the harness process), %d rounds each way, lease %v.%s\n\n",
			s.About, f.Candidates, f.Observers, f.Rounds, f.Lease, on)
		return
	}
	if c := s.Curve; c != nil {
		fmt.Fprintf(w, "%s: %s.%s\n", s.About, curveSetup(c), on)
		if sr.Note != "" {
			fmt.Fprintf(w, "\n%s\n", sr.Note)
		}
		return
	}
	runs := ""
	if len(sr.Metrics) > 0 && len(sr.Metrics[0].Runs) > 1 {
		runs = fmt.Sprintf(" Medians of %d runs of each library, the order reversed every other run.", len(sr.Metrics[0].Runs))
	}
	fmt.Fprintf(w, "%s: %s.%s%s\n\n", s.About, s.Params, on, runs)
	if sr.Note != "" {
		fmt.Fprintf(w, "%s\n\n", sr.Note)
	}
}

// curveSetup describes a curve's sizes and windows.
func curveSetup(c *workload.CurveParams) string {
	var sizes []string
	for _, n := range c.Sizes {
		sizes = append(sizes, count(n))
	}
	at := strings.Join(sizes, ", ")
	switch c.Kind {
	case workload.CurveWaiters:
		return fmt.Sprintf("%s sessions over %d processes; lock: hold %v per turn; semaphore of %d permits: hold %v; Redis measured %v with nobody waiting, %v with everyone queued, %v while they take turns (after a rotation: every session had a turn)",
			at, c.Procs, c.Hold, c.Limit, c.SemHold, c.Idle, c.Wait, c.Handoff)
	case workload.CurveNames:
		return fmt.Sprintf("%s names, up to %s through the client; above that Redis is filled with copies of the keys the last real name left (DUMP/RESTORE, same TTL), a cheaper measurement, and the client is not measured", at, count(c.Real))
	case workload.CurveHeld:
		return fmt.Sprintf("%s locks, lease %v (a renewal tick every %v), held %v", at, c.Holding.LeaseTTL, c.Holding.Renew(), c.Holding.HoldFor())
	case workload.CurveCommands:
		return c.Shape.String() + ", baton on a standalone server, then on the cluster"
	}
	return at
}

// Table writes one scenario's Markdown table and the notes under it. A
// semaphore scenario's table has a "max holders" column (the most holders
// of one semaphore seen at once; never more than the limit for a correct
// semaphore) and "over limit" (acquisitions that found the limit reached)
// in the place of "overlaps".
func Table(w io.Writer, ms []workload.Metrics) {
	limit := 0
	for _, m := range ms {
		limit = max(limit, m.Limit)
	}
	if limit > 0 {
		fmt.Fprintf(w, "| library | acq/s | util | wait p50 | p99 | max | gap p50 | p99 | cmds/acq | CPU us/acq | Jain | max holders (limit %d) | over limit |\n", limit)
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	} else {
		fmt.Fprintln(w, "| library | acq/s | util | wait p50 | p99 | max | gap p50 | p99 | cmds/acq | CPU us/acq | Jain | overlaps |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	}
	for _, m := range ms {
		if m.SetupError != "" {
			fmt.Fprintf(w, "| %s | error | | | | | | | | | | |%s\n", m.Library, map[bool]string{true: " |", false: ""}[limit > 0])
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | ",
			m.Library, num(float64(m.AcqPerSec), 0), num(float64(m.Util), 2),
			dur(m.WaitP50US), dur(m.WaitP99US), dur(m.WaitMaxUS),
			dur(m.GapP50US), dur(m.GapP99US),
			num(float64(m.CmdsPerAcq), 1), num(float64(m.CPUUSPerAcq), 1), num(float64(m.Jain), 3))
		if limit > 0 {
			holders := fmt.Sprint(m.MaxHolders)
			if m.Limit > 0 && m.MaxHolders > int64(m.Limit) {
				holders = "**" + holders + " (VIOLATION)**"
			}
			over := fmt.Sprint(m.Overlaps)
			if m.Overlaps > 0 {
				over = "**" + over + "**"
			}
			fmt.Fprintf(w, "%s | %s |\n", holders, over)
		} else {
			fmt.Fprintf(w, "%d |\n", m.Overlaps)
		}
	}
	Notes(w, ms)
	ReplicaComparison(w, ms)
}

// ReplicaComparison writes, when both are present, baton and
// baton+MinReplicas1 side by side with the difference.
func ReplicaComparison(w io.Writer, ms []workload.Metrics) {
	var a, b *workload.Metrics
	for i := range ms {
		switch {
		case ms[i].SetupError != "":
		case ms[i].Library == "baton":
			a = &ms[i]
		case ms[i].Library == lockers.BatonMinReplicas:
			b = &ms[i]
		}
	}
	if a == nil || b == nil {
		return
	}
	fmt.Fprintf(w, "\nCost of MinReplicas 1 (WAIT for one replica):\n\n")
	fmt.Fprintf(w, "| metric | %s | %s | difference |\n|---|--:|--:|--:|\n", a.Library, b.Library)
	ratio := func(x, y float64) string {
		if x == 0 || math.IsNaN(x) || math.IsNaN(y) {
			return "-"
		}
		return fmt.Sprintf("x%.2f", y/x)
	}
	fmt.Fprintf(w, "| acq/s | %s | %s | %s |\n", num(float64(a.AcqPerSec), 0), num(float64(b.AcqPerSec), 0), ratio(float64(a.AcqPerSec), float64(b.AcqPerSec)))
	for _, r := range []struct {
		name string
		x, y workload.Num
	}{
		{"wait p50 (Lock)", a.WaitP50US, b.WaitP50US},
		{"wait p99 (Lock)", a.WaitP99US, b.WaitP99US},
		{"unlock p50", a.UnlockP50, b.UnlockP50},
		{"unlock p99", a.UnlockP99, b.UnlockP99},
		{"Lock+Unlock p50", a.CycleP50US, b.CycleP50US},
		{"Lock+Unlock p99", a.CycleP99US, b.CycleP99US},
	} {
		d := "-"
		if !math.IsNaN(float64(r.x)) && !math.IsNaN(float64(r.y)) {
			switch diff := r.y - r.x; {
			case math.Abs(float64(diff)) < 0.5:
				d = "0µs"
			case diff > 0:
				d = "+" + dur(diff)
			default:
				d = dur(diff)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.name, dur(r.x), dur(r.y), d)
	}
	fmt.Fprintf(w, "| cmds/acq | %s | %s | %s |\n", num(float64(a.CmdsPerAcq), 1), num(float64(b.CmdsPerAcq), 1), ratio(float64(a.CmdsPerAcq), float64(b.CmdsPerAcq)))
	fmt.Fprintf(w, "| CPU us/acq | %s | %s | %s |\n", num(float64(a.CPUUSPerAcq), 1), num(float64(b.CPUUSPerAcq), 1), ratio(float64(a.CPUUSPerAcq), float64(b.CPUUSPerAcq)))
}

// Notes lists anything abnormal under a table.
func Notes(w io.Writer, ms []workload.Metrics) {
	var notes []string
	for _, m := range ms {
		if m.SetupError != "" {
			notes = append(notes, fmt.Sprintf("**%s**: setup failed: %s", m.Library, m.SetupError))
		}
		switch {
		case m.Overlaps > 0 && m.Limit > 0:
			notes = append(notes, fmt.Sprintf("**%s**: %d acquisitions OVER THE LIMIT (holder counter %d, intervals %d): up to %d holders of a semaphore of %d permits",
				m.Library, m.Overlaps, m.OverlapsAtomic, m.OverlapsInterval, m.MaxHolders, m.Limit))
		case m.Overlaps > 0:
			notes = append(notes, fmt.Sprintf("**%s**: %d OVERLAPS (atomic counter %d, intervals %d): two holders of one name at once",
				m.Library, m.Overlaps, m.OverlapsAtomic, m.OverlapsInterval))
		}
		if m.FencingViolations > 0 {
			what := "a later holder got a token <= its predecessor's"
			if m.Limit > 0 {
				what = "an acquisition that began after another had returned got a token <= that one's, or two shared a token"
			}
			notes = append(notes, fmt.Sprintf("**%s**: %d fencing-token regressions (%s)", m.Library, m.FencingViolations, what))
		}
		for _, e := range sortedCounts(m.LockErrors) {
			notes = append(notes, fmt.Sprintf("**%s**: Lock error x%d: %s", m.Library, e.n, e.k))
		}
		for _, e := range sortedCounts(m.UnlockErrors) {
			notes = append(notes, fmt.Sprintf("**%s**: Unlock error x%d: %s", m.Library, e.n, e.k))
		}
		if len(m.Hung) > 0 {
			notes = append(notes, fmt.Sprintf("**%s**: %d goroutine(s) HUNG past the deadline (+%v grace): %s",
				m.Library, len(m.Hung), workload.HangGrace, strings.Join(first(m.Hung, 4), "; ")))
		}
		if m.Censored > 0 && float64(m.CensoredMaxWUS) > float64(m.WaitMaxUS) {
			notes = append(notes, fmt.Sprintf("%s: a Lock call was still waiting at the deadline after %s (longer than any completed wait)",
				m.Library, dur(m.CensoredMaxWUS)))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// Markdown renders the whole run.
func Markdown(w io.Writer, r *Run) {
	fmt.Fprintf(w, "# lockbench results\n\n%s, %s, GOMAXPROCS %d, %d CPUs, redis %s, instances as %s.\n\n`%s`\n",
		r.Started.Format(time.RFC3339), r.GoVersion, r.GOMAXPROCS, r.NumCPU, r.Redis, ProcsText(r.Procs, r.ProcsScenarios), r.Command)
	if r.Baton != "" {
		fmt.Fprintf(w, "\nbaton: %s\n", r.Baton)
	}
	for _, s := range r.Scenarios {
		Header(w, s)
		switch {
		case s.Failover != nil:
			FailoverTable(w, *s.Failover)
		case s.Curve != nil:
			CurveTable(w, s.Curve)
		case s.Holding != nil:
			HoldingTable(w, s.Holding)
		case len(s.Metrics) > 0:
			Table(w, s.Metrics)
			if v, ok := frontFor(r, s.Scenario.Name); ok {
				FrontTable(w, v)
			}
		}
	}
	FrontSummary(w, r.Fronts)
	if r.Seconds > 0 {
		fmt.Fprintf(w, "\nWall time of the run: %.0f s.\n", r.Seconds)
	}
}

func frontFor(r *Run, shape string) (front.Verdict, bool) {
	for _, v := range r.Fronts {
		if v.Shape == shape {
			return v, true
		}
	}
	return front.Verdict{}, false
}

// ProcsText says how the instances ran: as processes (-procs), or in one
// process but for the scenarios listed.
func ProcsText(p bool, except []string) string {
	if p {
		return "separate processes"
	}
	if len(except) > 0 {
		return "goroutine groups in one process (separate processes in " + strings.Join(except, ", ") + ")"
	}
	return "goroutine groups in one process"
}

// WriteFiles writes results.json, results.md and one PNG per scenario.
func WriteFiles(dir string, r *Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	Markdown(&md, r)
	if len(r.Fronts) > 0 {
		fmt.Fprintf(&md, "\n![the front of every shape](%s)\n", FrontChartsName)
	}
	for _, s := range r.Scenarios {
		if s.Curve != nil {
			fmt.Fprintf(&md, "\n![%s](%s)\n", s.Scenario.Name, CurveChartName(s.Curve.Kind))
		}
	}
	for _, s := range r.Scenarios {
		if s.Curve == nil && len(s.Metrics) > 0 {
			fmt.Fprintf(&md, "\n![%s wait-time CDF](%s)\n", s.Scenario.Name, ChartName(s.Scenario.Name))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return writeCharts(dir, r)
}

// writeCharts writes the wait-time CDF of each contention scenario, the
// front of each shape (one file each and all tiled in one) and each
// curve's chart.
func writeCharts(dir string, r *Run) error {
	for _, s := range r.Scenarios {
		switch {
		case s.Curve != nil:
			if err := CurveChart(filepath.Join(dir, CurveChartName(s.Curve.Kind)), s.Curve); err != nil {
				return fmt.Errorf("chart %s: %w", s.Scenario.Name, err)
			}
		case len(s.Metrics) > 0:
			if err := WaitChart(filepath.Join(dir, ChartName(s.Scenario.Name)), s); err != nil {
				return fmt.Errorf("chart %s: %w", s.Scenario.Name, err)
			}
		}
	}
	for _, v := range r.Fronts {
		if err := FrontChart(filepath.Join(dir, FrontChartName(v.Shape)), v); err != nil {
			return fmt.Errorf("front chart %s: %w", v.Shape, err)
		}
	}
	if err := FrontCharts(filepath.Join(dir, FrontChartsName), r.Fronts); err != nil {
		return fmt.Errorf("front chart: %w", err)
	}
	return nil
}

// ChartName is the PNG file name of a scenario's chart.
func ChartName(scenario string) string { return "wait-" + scenario + ".png" }

type kc struct {
	k string
	n int
}

func sortedCounts(m map[string]int) []kc {
	var out []kc
	for k, n := range m {
		out = append(out, kc{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n > out[j].n || out[i].n == out[j].n && out[i].k < out[j].k })
	return out
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func num(f float64, prec int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, f)
}

func pctCore(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.1f%% core", f*100)
}

// dur formats microseconds compactly.
func dur(v workload.Num) string {
	us := float64(v)
	if math.IsNaN(us) {
		return "-"
	}
	neg := ""
	if us < 0 {
		neg, us = "-", -us
	}
	switch {
	case us < 1000:
		return fmt.Sprintf("%s%.0fµs", neg, us)
	case us < 10_000:
		return fmt.Sprintf("%s%.2fms", neg, us/1e3)
	case us < 999_950:
		return fmt.Sprintf("%s%.1fms", neg, us/1e3)
	default:
		return fmt.Sprintf("%s%.2fs", neg, us/1e6)
	}
}
