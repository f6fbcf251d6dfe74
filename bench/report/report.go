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

	"github.com/batonlock/baton/bench/workload"
)

// ScenarioResult is one scenario with every library's line.
type ScenarioResult struct {
	Scenario workload.Scenario         `json:"scenario"`
	Metrics  []workload.Metrics        `json:"results,omitempty"`
	Holding  []workload.HoldingMetrics `json:"holding,omitempty"`
}

// Run is the whole report.
type Run struct {
	Started    time.Time        `json:"started"`
	GoVersion  string           `json:"go_version"`
	GOMAXPROCS int              `json:"gomaxprocs"`
	NumCPU     int              `json:"num_cpu"`
	Redis      string           `json:"redis"`
	Procs      bool             `json:"procs"`
	Libraries  []string         `json:"libraries"`
	Command    string           `json:"command"`
	Scenarios  []ScenarioResult `json:"scenarios"`
}

// Header writes the scenario heading.
func Header(w io.Writer, s workload.Scenario) {
	fmt.Fprintf(w, "\n### %s\n\n", s.Name)
	if s.Holding != nil {
		h := s.Holding
		fmt.Fprintf(w, "%s: %d locks (rueidislock: %d), lease %v, renewal assumed every %v, held %v.\n\n",
			s.About, h.Locks, h.PeerLocks, h.LeaseTTL, h.Renew(), h.HoldFor())
		return
	}
	fmt.Fprintf(w, "%s: %s.\n\n", s.About, s.Params)
}

// Table writes one scenario's Markdown table and the notes under it.
func Table(w io.Writer, ms []workload.Metrics) {
	fmt.Fprintln(w, "| library | acq/s | util | wait p50 | p99 | max | gap p50 | p99 | cmds/acq | CPU us/acq | Jain | overlaps |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, m := range ms {
		if m.SetupError != "" {
			fmt.Fprintf(w, "| %s | error | | | | | | | | | | |\n", m.Library)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			m.Library, num(float64(m.AcqPerSec), 0), num(float64(m.Util), 2),
			dur(m.WaitP50US), dur(m.WaitP99US), dur(m.WaitMaxUS),
			dur(m.GapP50US), dur(m.GapP99US),
			num(float64(m.CmdsPerAcq), 1), num(float64(m.CPUUSPerAcq), 1), num(float64(m.Jain), 3), m.Overlaps)
	}
	Notes(w, ms)
}

// Notes lists anything abnormal under a table.
func Notes(w io.Writer, ms []workload.Metrics) {
	var notes []string
	for _, m := range ms {
		if m.SetupError != "" {
			notes = append(notes, fmt.Sprintf("**%s**: setup failed: %s", m.Library, m.SetupError))
		}
		if m.Overlaps > 0 {
			notes = append(notes, fmt.Sprintf("**%s**: %d OVERLAPS (atomic counter %d, intervals %d): two holders of one name at once",
				m.Library, m.Overlaps, m.OverlapsAtomic, m.OverlapsInterval))
		}
		if m.FencingViolations > 0 {
			notes = append(notes, fmt.Sprintf("**%s**: %d fencing-token regressions (a later holder got a token <= its predecessor's)", m.Library, m.FencingViolations))
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

// HoldingTable writes the holding scenario's table.
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
		r.Started.Format(time.RFC3339), r.GoVersion, r.GOMAXPROCS, r.NumCPU, r.Redis, procsText(r.Procs), r.Command)
	for _, s := range r.Scenarios {
		Header(w, s.Scenario)
		if s.Holding != nil {
			HoldingTable(w, s.Holding)
		} else {
			Table(w, s.Metrics)
		}
	}
}

func procsText(p bool) string {
	if p {
		return "separate processes"
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
	for _, s := range r.Scenarios {
		if len(s.Metrics) > 0 {
			fmt.Fprintf(&md, "\n![%s wait-time CDF](%s)\n", s.Scenario.Name, ChartName(s.Scenario.Name))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		if len(s.Metrics) == 0 {
			continue
		}
		if err := WaitChart(filepath.Join(dir, ChartName(s.Scenario.Name)), s); err != nil {
			return fmt.Errorf("chart %s: %w", s.Scenario.Name, err)
		}
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
