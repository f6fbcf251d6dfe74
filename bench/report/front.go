package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/batonlock/baton/bench/front"
	"github.com/batonlock/baton/bench/workload"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WorkOf is what a shape's work is measured by: utilization where the
// lock is held for a while, throughput where it is not (utilization is ~0
// there by definition).
func WorkOf(p workload.Params) front.Work {
	if p.Hold > 0 {
		return front.Util
	}
	return front.Throughput
}

// FrontOf judges baton in a contention scenario's results; false when
// the scenario is not a contention one or has no baton line.
func FrontOf(sr ScenarioResult) (front.Verdict, bool) {
	if !sr.Scenario.IsContention() || len(sr.Metrics) == 0 {
		return front.Verdict{}, false
	}
	work := WorkOf(sr.Scenario.Params)
	var pts []front.Point
	has := false
	for _, m := range sr.Metrics {
		if m.SetupError != "" {
			continue
		}
		w := float64(m.Util)
		if work == front.Throughput {
			w = float64(m.AcqPerSec)
		}
		has = has || m.Library == "baton"
		pts = append(pts, front.Point{Library: m.Library, P99US: float64(m.WaitP99US), CPUUS: float64(m.CPUUSPerAcq), Work: w, Problems: m.Problems()})
	}
	if !has {
		return front.Verdict{}, false
	}
	return front.Judge(sr.Scenario.Name, work, pts), true
}

// FrontTable writes one shape's points and baton's verdict.
func FrontTable(w io.Writer, v front.Verdict) {
	fmt.Fprintf(w, "\nFront of %s: wait p99 against Redis CPU per acquisition (a peer at least as good on both puts baton off the front):\n\n", v.Shape)
	fmt.Fprintf(w, "| library | wait p99 | CPU µs/acq | %s | at least as good as baton on both |\n|---|--:|--:|--:|---|\n", v.Work)
	for _, p := range v.Points {
		dom := ""
		switch {
		case p.Problems:
			dom = "(broke a promise: not counted)"
		case p.Library == "baton":
			dom = "—"
		case !front.IsPeer(p.Library):
			dom = "(baton: not a peer)"
		case containsStr(v.DominatedBy, p.Library):
			dom = "**yes**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", p.Library, dur(workload.Num(p.P99US)), num(p.CPUUS, 1), workText(v.Work, p.Work), dom)
	}
	fmt.Fprintf(w, "\n%s\n", verdictLine(v))
}

func workText(w front.Work, x float64) string {
	if w == front.Util {
		return num(x, 2)
	}
	return num(x, 0)
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// verdictLine says in one sentence where baton stands.
func verdictLine(v front.Verdict) string {
	if v.Missing != "" {
		return "baton: no verdict (" + v.Missing + ")."
	}
	on := "**yes**"
	if !v.OnFront {
		on = "**NO**: " + strings.Join(v.DominatedBy, ", ") + " at least as good on both"
	}
	return fmt.Sprintf("baton on the front: %s; CPU %.2fx the cheapest peer's (%s, %.1f µs): %s (at most %.1fx); %s %s against the best %s (%s): %s (at least %.0f %% of it); all three: %s.",
		on, v.CPURatio, v.CheapestPeer, v.CheapestCPU, okText(v.CPUOK), front.CPUSlack,
		v.Work, workText(v.Work, v.Baton.Work), workText(v.Work, v.BestWork), v.BestWorkLib, okText(v.WorkOK), front.WorkSlack*100, okText(v.Holds))
}

func okText(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// FrontSummary writes one line per shape.
func FrontSummary(w io.Writer, vs []front.Verdict) {
	if len(vs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Front\n\nbaton against every peer configuration (polling swept at %s) in each shape: on the front = no peer at least as good on both wait p99 and Redis CPU per acquisition; CPU at most %.1fx the cheapest peer's; utilization (throughput where nothing is held) at least %.0f %% of the best.\n\n",
		sweepText(), front.CPUSlack, front.WorkSlack*100)
	fmt.Fprintln(w, "| shape | baton wait p99 | baton CPU µs/acq | on the front | peers at least as good on both | CPU / cheapest peer | work / best | all three |")
	fmt.Fprintln(w, "|---|--:|--:|---|---|--:|--:|---|")
	for _, v := range vs {
		if v.Missing != "" {
			fmt.Fprintf(w, "| %s | | | no verdict: %s | | | | |\n", v.Shape, v.Missing)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.2fx (%s) %s | %s %.2f (%s) %s | %s |\n", v.Shape,
			dur(workload.Num(v.Baton.P99US)), num(v.Baton.CPUUS, 1), okText(v.OnFront), strings.Join(v.DominatedBy, ", "),
			v.CPURatio, v.CheapestPeer, okText(v.CPUOK), v.Work, v.WorkRatio, v.BestWorkLib, okText(v.WorkOK), okText(v.Holds))
	}
}

func sweepText() string { return "1, 5, 10, 20 and 50 ms" }

// FrontChartName is the PNG of one shape's front; FrontChartsName has
// every shape's.
func FrontChartName(shape string) string { return "front-" + shape + ".png" }

// FrontChartsName is the PNG with every shape's front, tiled.
const FrontChartsName = "front.png"

// sweepRe splits a polling library's name into its base and interval.
var sweepRe = regexp.MustCompile(`^(.+)-(\d+)ms$`)

// frontSeries is one drawn series of a front chart: a library, or a
// polling library's sweep (its intervals joined by a line, each point
// labelled with its interval).
type frontSeries struct {
	Name   string
	Pts    []front.Point
	Labels []string // per point, for a sweep
	Baton  bool
}

// frontSeriesOf groups a verdict's points for drawing: every sweep
// ("<base>-<n>ms") becomes one series ordered by interval; baton first.
func frontSeriesOf(v front.Verdict) []frontSeries {
	var out []frontSeries
	sweeps := map[string]int{}
	type iv struct {
		ms int
		p  front.Point
	}
	byBase := map[string][]iv{}
	for _, p := range v.Points {
		if m := sweepRe.FindStringSubmatch(p.Library); m != nil {
			ms, _ := strconv.Atoi(m[2])
			if _, ok := sweeps[m[1]]; !ok {
				sweeps[m[1]] = len(out)
				out = append(out, frontSeries{Name: m[1] + ", by retry interval"})
			}
			byBase[m[1]] = append(byBase[m[1]], iv{ms, p})
			continue
		}
		out = append(out, frontSeries{Name: p.Library, Pts: []front.Point{p}, Baton: p.Library == "baton"})
	}
	for base, ivs := range byBase {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].ms < ivs[j].ms })
		s := &out[sweeps[base]]
		for _, x := range ivs {
			s.Pts = append(s.Pts, x.p)
			s.Labels = append(s.Labels, strconv.Itoa(x.ms)+"ms")
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Baton && !out[j].Baton })
	return out
}

// frontPlot draws one shape: wait p99 (ms) against Redis CPU per
// acquisition (µs), both on log scales.
func frontPlot(v front.Verdict, legend bool) (*plot.Plot, error) {
	p := plot.New()
	verdict := "no verdict"
	if v.Missing == "" {
		verdict = "baton on the front: " + map[bool]string{true: "yes", false: "NO"}[v.OnFront]
	}
	p.Title.Text = fmt.Sprintf("%s (%s)", v.Shape, verdict)
	p.X.Label.Text = "Redis CPU per acquisition (µs, log)"
	p.Y.Label.Text = "wait p99 (ms, log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	drawn := 0
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, s := range frontSeriesOf(v) {
		var xys plotter.XYs
		var labels []string
		for j, pt := range s.Pts {
			if pt.Problems || !(pt.CPUUS > 0) || !(pt.P99US > 0) {
				continue
			}
			xy := plotter.XY{X: pt.CPUUS, Y: math.Max(pt.P99US, 1) / 1000}
			xys = append(xys, xy)
			xlo, xhi, ylo, yhi = min(xlo, xy.X), max(xhi, xy.X), min(ylo, xy.Y), max(yhi, xy.Y)
			if s.Labels != nil {
				labels = append(labels, s.Labels[j])
			}
		}
		if len(xys) == 0 {
			continue
		}
		c := plotutil.Color(i)
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		sc.Color = c
		sc.Shape = plotutil.Shape(i)
		sc.Radius = vg.Points(3)
		if s.Baton {
			sc.Color, sc.Shape, sc.Radius = color.RGBA{R: 200, A: 255}, draw.PyramidGlyph{}, vg.Points(6)
		}
		p.Add(sc)
		if legend {
			p.Legend.Add(s.Name, sc)
		}
		if len(xys) > 1 {
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.Color, l.Dashes = c, []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(l)
		}
		if labels != nil {
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
			if err != nil {
				return nil, err
			}
			for k := range lb.TextStyle {
				lb.TextStyle[k].Font.Size = vg.Points(7)
				lb.TextStyle[k].Color = c
			}
			lb.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
			p.Add(lb)
		}
		drawn++
	}
	if drawn == 0 {
		return nil, nil
	}
	// Room around the points for their labels, and above them for the
	// legend.
	p.X.Min, p.X.Max = xlo/1.5, xhi*1.5
	p.Y.Min, p.Y.Max = ylo/2, yhi*8
	return p, nil
}

// FrontChart writes one shape's front as a PNG.
func FrontChart(path string, v front.Verdict) error {
	p, err := frontPlot(v, true)
	if err != nil || p == nil {
		return err
	}
	return p.Save(8*vg.Inch, 6*vg.Inch, path)
}

// FrontCharts writes every shape's front as tiles of one PNG.
func FrontCharts(path string, vs []front.Verdict) error {
	var ps []*plot.Plot
	for _, v := range vs {
		p, err := frontPlot(v, true)
		if err != nil {
			return err
		}
		if p != nil {
			p.Legend.TextStyle.Font.Size = vg.Points(8)
			ps = append(ps, p)
		}
	}
	return saveTiles(path, ps, 2, 6*vg.Inch, 4.5*vg.Inch)
}
