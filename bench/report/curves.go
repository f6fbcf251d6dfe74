package report

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/batonlock/baton/bench/workload"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// CurveChartName is the PNG of a curve.
func CurveChartName(kind workload.CurveKind) string { return "curve-" + string(kind) + ".png" }

// CurveTable writes a curve's tables and notes.
func CurveTable(w io.Writer, cr *workload.CurveResult) {
	switch cr.Kind {
	case workload.CurveWaiters:
		for _, prim := range []string{"lock", "semaphore"} {
			if pts := waitersOf(cr, prim); len(pts) > 0 {
				waitersTable(w, prim, pts)
			}
		}
	case workload.CurveNames:
		namesTable(w, cr.Names)
	case workload.CurveHeld:
		heldTable(w, cr.Held)
	case workload.CurveCommands:
		if cr.Commands != nil {
			commandsTable(w, cr.Commands)
		}
	}
	if len(cr.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range cr.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

func waitersOf(cr *workload.CurveResult, prim string) []workload.WaitersPoint {
	var out []workload.WaitersPoint
	for _, p := range cr.Waiters {
		if p.Primitive == prim {
			out = append(out, p)
		}
	}
	return out
}

// row writes one table row: a label and one cell per point.
func row(w io.Writer, label string, cells []string) {
	fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
}

func header(w io.Writer, first string, cols []string) {
	fmt.Fprintf(w, "| %s | %s |\n|---|%s\n", first, strings.Join(cols, " | "), strings.Repeat("--:|", len(cols)))
}

func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func waitersTable(w io.Writer, prim string, pts []workload.WaitersPoint) {
	var cols []string
	for _, p := range pts {
		cols = append(cols, count(p.Sessions))
	}
	what := "a holder hands off every ~5 ms"
	if prim == "semaphore" && len(pts) > 0 {
		what = fmt.Sprintf("a semaphore of %d permits, a permit comes free every ~5 ms", pts[0].Limit)
	}
	fmt.Fprintf(w, "\n%s: sessions waiting on one name over %d processes, %s:\n\n", prim, pts[0].Procs, what)
	header(w, "waiting sessions", cols)
	cells := func(f func(workload.WaitersPoint) string) []string {
		var out []string
		for _, p := range pts {
			if p.Error != "" {
				out = append(out, "error")
				continue
			}
			out = append(out, f(p))
		}
		return out
	}
	row(w, "Redis CPU while they only wait (above idle)", cells(func(p workload.WaitersPoint) string { return pctCore(float64(p.WaitCPU)) }))
	row(w, "Redis commands/s while they only wait (above idle)", cells(func(p workload.WaitersPoint) string { return num(float64(p.WaitCmds), 0) }))
	row(w, "Redis CPU per hand-off", cells(func(p workload.WaitersPoint) string { return num(float64(p.CPUPerHandoffUS), 0) + " µs" }))
	row(w, "commands per hand-off", cells(func(p workload.WaitersPoint) string { return num(float64(p.CmdsPerHandoff), 1) }))
	row(w, "hand-off gap p50", cells(func(p workload.WaitersPoint) string { return dur(p.GapP50US) }))
	row(w, "hand-off gap p99", cells(func(p workload.WaitersPoint) string { return dur(p.GapP99US) }))
	row(w, "hand-offs/s", cells(func(p workload.WaitersPoint) string {
		return num(float64(p.Handoffs)/p.HandoffSecs, 0)
	}))
	row(w, "queueing all of them took", cells(func(p workload.WaitersPoint) string { return num(p.QueueSecs, 2) + " s" }))
	row(w, "turns before the window (a rotation)", cells(func(p workload.WaitersPoint) string { return num(p.RotationSecs, 1) + " s" }))
	row(w, "Redis CPU idle (clients connected, nobody waiting)", cells(func(p workload.WaitersPoint) string { return pctCore(float64(p.IdleCPU)) }))
	var notes []string
	for _, p := range pts {
		if p.Error != "" {
			notes = append(notes, fmt.Sprintf("**%d sessions**: %s", p.Sessions, p.Error))
		}
		if p.Turns.Problems() {
			var b strings.Builder
			Notes(&b, []workload.Metrics{p.Turns})
			notes = append(notes, fmt.Sprintf("%d sessions: %s", p.Sessions, strings.TrimSpace(strings.ReplaceAll(b.String(), "\n- ", "; "))))
		}
	}
	if n := len(pts); n >= 2 && pts[n-1].Error == "" && pts[n-2].Error == "" {
		a, b := pts[n-2], pts[n-1]
		notes = append(notes, fmt.Sprintf("%s to %s sessions (%.0fx the waiters): waiting costs %s, a hand-off's CPU %s, its commands %s, its gap p99 %s",
			count(a.Sessions), count(b.Sessions), float64(b.Sessions)/float64(a.Sessions),
			ratio(float64(b.WaitCPU), float64(a.WaitCPU)), ratio(float64(b.CPUPerHandoffUS), float64(a.CPUPerHandoffUS)),
			ratio(float64(b.CmdsPerHandoff), float64(a.CmdsPerHandoff)), ratio(float64(b.GapP99US), float64(a.GapP99US))))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// ratio formats b/a as "x1.23" ("-" when undefined).
func ratio(b, a float64) string {
	if !(a > 0) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("x%.2f", b/a)
}

func namesTable(w io.Writer, pts []workload.NamesPoint) {
	if len(pts) == 0 {
		return
	}
	var cols []string
	for _, p := range pts {
		cols = append(cols, count(p.Names))
	}
	fmt.Fprintf(w, "\nnames each locked and unlocked once through one client (state left above a baseline taken after a warm-up):\n\n")
	header(w, "names used", cols)
	cells := func(f func(workload.NamesPoint) string) []string {
		var out []string
		for _, p := range pts {
			out = append(out, f(p))
		}
		return out
	}
	row(w, "measured", cells(func(p workload.NamesPoint) string {
		if p.Real {
			return "through the client"
		}
		return "Redis filled (cheaper)"
	}))
	row(w, "client heap", cells(func(p workload.NamesPoint) string { return bytesText(float64(p.HeapBytes)) }))
	row(w, "client heap per 1,000 names", cells(func(p workload.NamesPoint) string { return bytesText(float64(p.HeapBytesPerK)) }))
	row(w, "client goroutines", cells(func(p workload.NamesPoint) string { return num(float64(p.Goroutines), 0) }))
	row(w, "keys left in Redis", cells(func(p workload.NamesPoint) string { return count(int(p.Keys)) }))
	row(w, "keys per name", cells(func(p workload.NamesPoint) string { return num(float64(p.KeysPerName), 2) }))
	row(w, "Redis memory", cells(func(p workload.NamesPoint) string { return bytesText(float64(p.MemBytes)) }))
	row(w, "Redis memory per name", cells(func(p workload.NamesPoint) string { return num(float64(p.MemBytesPerName), 0) + " B" }))
	row(w, "TTL of a name's keys", cells(func(p workload.NamesPoint) string { return num(float64(p.KeyTTLSeconds), 0) + " s" }))
	row(w, "time for this step", cells(func(p workload.NamesPoint) string { return num(p.Seconds, 1) + " s" }))
	for _, p := range pts {
		if p.Error != "" {
			fmt.Fprintf(w, "\n- **%s names**: %s\n", count(p.Names), p.Error)
		}
	}
}

func bytesText(b float64) string {
	switch {
	case math.IsNaN(b):
		return "-"
	case math.Abs(b) >= 1<<20:
		return fmt.Sprintf("%.1f MB", b/(1<<20))
	case math.Abs(b) >= 1<<10:
		return fmt.Sprintf("%.1f KB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// cmdsPerLockTick is Redis commands per held lock per renewal tick.
func cmdsPerLockTick(h workload.HoldingMetrics) float64 {
	if h.Ticks <= 0 || h.Acquired == 0 {
		return math.NaN()
	}
	return float64(h.CmdsPerSec) * h.HoldSeconds / float64(h.Ticks) / float64(h.Acquired)
}

func heldTable(w io.Writer, hs []workload.HoldingMetrics) {
	if len(hs) == 0 {
		return
	}
	var cols []string
	for _, h := range hs {
		cols = append(cols, count(h.Locks))
	}
	fmt.Fprintf(w, "\nlocks held by one client across renewal ticks (the holding scenario at each size):\n\n")
	header(w, "locks held", cols)
	cells := func(f func(workload.HoldingMetrics) string) []string {
		var out []string
		for _, h := range hs {
			if h.Error != "" {
				out = append(out, "error")
				continue
			}
			out = append(out, f(h))
		}
		return out
	}
	row(w, "held", cells(func(h workload.HoldingMetrics) string { return count(h.Acquired) }))
	row(w, "client heap per lock", cells(func(h workload.HoldingMetrics) string { return num(float64(h.HeapBytesPerLock), 0) + " B" }))
	row(w, "goroutines per lock", cells(func(h workload.HoldingMetrics) string { return num(float64(h.GoroutinesPerLock), 3) }))
	row(w, "Redis commands per lock per tick", cells(func(h workload.HoldingMetrics) string { return num(cmdsPerLockTick(h), 2) }))
	row(w, "round trips per tick", cells(func(h workload.HoldingMetrics) string { return num(float64(h.RoundTripsPerTick), 2) }))
	row(w, "scripts per tick", cells(func(h workload.HoldingMetrics) string { return num(float64(h.ScriptsPerTick), 1) }))
	row(w, "Redis CPU", cells(func(h workload.HoldingMetrics) string { return pctCore(float64(h.CPUPerSec)) }))
	row(w, "Redis CPU per 1,000 locks", cells(func(h workload.HoldingMetrics) string {
		return pctCore(float64(h.CPUPerSec) * 1000 / float64(max(h.Acquired, 1)))
	}))
	row(w, "ticks", cells(func(h workload.HoldingMetrics) string { return num(float64(h.Ticks), 2) }))
	row(w, "acquiring them took", cells(func(h workload.HoldingMetrics) string { return num(h.AcquireSeconds, 1) + " s" }))
	var b strings.Builder
	for _, h := range hs {
		if h.Error != "" {
			fmt.Fprintf(&b, "- **%s locks**: %s\n", count(h.Locks), h.Error)
		}
		for _, e := range sortedCounts(h.LockErrors) {
			fmt.Fprintf(&b, "- **%s locks**: Lock error x%d: %s\n", count(h.Locks), e.n, e.k)
		}
	}
	if b.Len() > 0 {
		fmt.Fprintf(w, "\n%s", b.String())
	}
}

func commandsTable(w io.Writer, c *workload.CommandsResult) {
	fmt.Fprintf(w, "\nbaton's Redis commands per acquisition by command (INFO commandstats, commands run inside scripts included), %s:\n\n", c.Shape)
	fmt.Fprintln(w, "| command | standalone | cluster | cluster - standalone |\n|---|--:|--:|--:|")
	rare := 0
	for _, r := range c.Rows {
		if max(nzf(r.Standalone), nzf(r.Cluster)) < minShownCalls {
			rare++
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", strings.ToUpper(r.Command), num(r.Standalone, 2), num(r.Cluster, 2), signed(nzf(r.Cluster)-nzf(r.Standalone)))
	}
	if rare > 0 {
		fmt.Fprintf(w, "| %d other commands, under %.3f per acquisition each (results.json) | | | |\n", rare, minShownCalls)
	}
	s, cl := c.Standalone, c.Cluster
	fmt.Fprintf(w, "| **all commands** | **%s** | **%s** | %s |\n", num(float64(s.CmdsPerAcq), 1), num(float64(cl.CmdsPerAcq), 1), signed(float64(cl.CmdsPerAcq-s.CmdsPerAcq)))
	fmt.Fprintf(w, "| Redis CPU µs/acq | %s | %s | |\n", num(float64(s.CPUUSPerAcq), 1), num(float64(cl.CPUUSPerAcq), 1))
	fmt.Fprintf(w, "| acq/s | %s | %s | |\n", num(float64(s.AcqPerSec), 0), num(float64(cl.AcqPerSec), 0))
	fmt.Fprintf(w, "| wait p99 | %s | %s | |\n", dur(s.WaitP99US), dur(cl.WaitP99US))
	var b strings.Builder
	Notes(&b, []workload.Metrics{s, cl})
	if b.Len() > 0 {
		fmt.Fprint(w, b.String())
	}
}

func signed(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%+.2f", f)
}

func nzf(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}

// minShownCalls is the fewest calls per acquisition a command needs to be
// listed in the commands table and chart (all are in results.json).
const minShownCalls = 0.005

// curveSeries is one line of a curve panel.
type curveSeries struct {
	Name string
	XYs  plotter.XYs
}

// curvePanel is one tile of a curve chart: one quantity against the
// curve's size.
type curvePanel struct {
	Title, XLabel, YLabel string
	Series                []curveSeries
}

// curvePanels turns a curve's result into its chart's tiles; points
// without a value (NaN, or not measured) are left out.
func curvePanels(cr *workload.CurveResult) []curvePanel {
	var ps []curvePanel
	add := func(title, x, y string, ss ...curveSeries) {
		var keep []curveSeries
		for _, s := range ss {
			if len(s.XYs) > 0 {
				keep = append(keep, s)
			}
		}
		if len(keep) > 0 {
			ps = append(ps, curvePanel{Title: title, XLabel: x, YLabel: y, Series: keep})
		}
	}
	switch cr.Kind {
	case workload.CurveWaiters:
		x := "waiting sessions (log)"
		per := func(f func(workload.WaitersPoint) float64) []curveSeries {
			var out []curveSeries
			for _, prim := range []string{"lock", "semaphore"} {
				var xys plotter.XYs
				for _, p := range waitersOf(cr, prim) {
					if p.Error == "" {
						xys = appendXY(xys, float64(p.Sessions), f(p))
					}
				}
				out = append(out, curveSeries{prim, xys})
			}
			return out
		}
		add("Redis CPU while they only wait", x, "% of a core", per(func(p workload.WaitersPoint) float64 { return 100 * float64(p.WaitCPU) })...)
		add("Redis CPU per hand-off", x, "µs", per(func(p workload.WaitersPoint) float64 { return float64(p.CPUPerHandoffUS) })...)
		add("commands per hand-off", x, "commands", per(func(p workload.WaitersPoint) float64 { return float64(p.CmdsPerHandoff) })...)
		add("hand-off gap p99", x, "ms", per(func(p workload.WaitersPoint) float64 { return float64(p.GapP99US) / 1000 })...)
	case workload.CurveNames:
		x := "names used (log)"
		one := func(name string, f func(workload.NamesPoint) float64) curveSeries {
			var xys plotter.XYs
			for _, p := range cr.Names {
				xys = appendXY(xys, float64(p.Names), f(p))
			}
			return curveSeries{name, xys}
		}
		add("client heap", x, "MB", one("baton", func(p workload.NamesPoint) float64 { return float64(p.HeapBytes) / (1 << 20) }))
		add("client goroutines", x, "goroutines", one("baton", func(p workload.NamesPoint) float64 { return float64(p.Goroutines) }))
		add("keys left in Redis", x, "keys", one("baton", func(p workload.NamesPoint) float64 { return float64(p.Keys) }))
		add("Redis memory", x, "MB", one("baton", func(p workload.NamesPoint) float64 { return float64(p.MemBytes) / (1 << 20) }))
	case workload.CurveHeld:
		x := "locks held (log)"
		one := func(f func(workload.HoldingMetrics) float64) curveSeries {
			var xys plotter.XYs
			for _, h := range cr.Held {
				if h.Error == "" {
					xys = appendXY(xys, float64(h.Locks), f(h))
				}
			}
			return curveSeries{"baton", xys}
		}
		add("client heap per lock", x, "bytes", one(func(h workload.HoldingMetrics) float64 { return float64(h.HeapBytesPerLock) }))
		add("Redis commands per lock per tick", x, "commands", one(cmdsPerLockTick))
		add("round trips per tick", x, "round trips", one(func(h workload.HoldingMetrics) float64 { return float64(h.RoundTripsPerTick) }))
		add("Redis CPU", x, "% of a core", one(func(h workload.HoldingMetrics) float64 { return 100 * float64(h.CPUPerSec) }))
	}
	return ps
}

func appendXY(xys plotter.XYs, x, y float64) plotter.XYs {
	if math.IsNaN(y) || math.IsInf(y, 0) {
		return xys
	}
	return append(xys, plotter.XY{X: x, Y: y})
}

// CurveChart writes a curve's chart (nothing for a curve without one).
func CurveChart(path string, cr *workload.CurveResult) error {
	if cr.Kind == workload.CurveCommands {
		return commandsChart(path, cr.Commands)
	}
	var ps []*plot.Plot
	for _, cp := range curvePanels(cr) {
		p := plot.New()
		p.Title.Text = cp.Title
		p.X.Label.Text, p.Y.Label.Text = cp.XLabel, cp.YLabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		for i, s := range cp.Series {
			l, sc, err := plotter.NewLinePoints(s.XYs)
			if err != nil {
				return err
			}
			l.Color, sc.Color, sc.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			p.Add(l, sc)
			if len(cp.Series) > 1 {
				p.Legend.Add(s.Name, l, sc)
			}
		}
		ps = append(ps, p)
	}
	return saveTiles(path, ps, 2, 4.5*vg.Inch, 3.2*vg.Inch)
}

// commandsChart draws the commands per acquisition the cluster changes
// most, as bars beside standalone's.
func commandsChart(path string, c *workload.CommandsResult) error {
	if c == nil || len(c.Rows) == 0 {
		return nil
	}
	var rows []workload.CommandsRow
	for _, r := range c.Rows {
		if max(nzf(r.Standalone), nzf(r.Cluster)) >= minShownCalls {
			rows = append(rows, r)
		}
	}
	if len(rows) > 14 {
		rows = rows[:14]
	}
	if len(rows) == 0 {
		return nil
	}
	var names []string
	var sv, cv plotter.Values
	for _, r := range rows {
		names = append(names, strings.ToUpper(r.Command))
		sv, cv = append(sv, nzf(r.Standalone)), append(cv, nzf(r.Cluster))
	}
	p := plot.New()
	p.Title.Text = "baton: Redis commands per acquisition, standalone and cluster"
	p.Y.Label.Text = "calls per acquisition"
	w := vg.Points(12)
	bs, err := plotter.NewBarChart(sv, w)
	if err != nil {
		return err
	}
	bc, err := plotter.NewBarChart(cv, w)
	if err != nil {
		return err
	}
	bs.Color, bc.Color = plotutil.Color(0), plotutil.Color(1)
	bs.LineStyle.Width, bc.LineStyle.Width = 0, 0
	bs.Offset, bc.Offset = -w/2, w/2
	p.Add(bs, bc, plotter.NewGrid())
	p.Legend.Add("standalone", bs)
	p.Legend.Add("cluster (3 primaries)", bc)
	p.Legend.Top = true
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -1, -0.5
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
