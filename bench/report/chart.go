package report

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// maxChartPoints bounds the points drawn per library.
const maxChartPoints = 1500

// WaitChart draws the empirical CDF of the wait time (Lock call start to
// lock held) per library, with a log-scale time axis in milliseconds.
func WaitChart(path string, s ScenarioResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: wait time CDF (Lock call -> held)", s.Scenario.Name)
	p.X.Label.Text = "wait (ms, log scale)"
	p.Y.Label.Text = "fraction of acquisitions <= x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	// Top left is empty: a CDF is near 0 at the shortest waits.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	drawn := 0
	for i, m := range s.Metrics {
		if len(m.WaitsUS) == 0 {
			continue
		}
		w := append([]float64(nil), m.WaitsUS...)
		sort.Float64s(w)
		n := len(w)
		step := 1
		if n > maxChartPoints {
			step = n / maxChartPoints
		}
		var xys plotter.XYs
		for j := 0; j < n; j += step {
			xys = append(xys, plotter.XY{X: clampMS(w[j]), Y: float64(j+1) / float64(n)})
		}
		xys = append(xys, plotter.XY{X: clampMS(w[n-1]), Y: 1})
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(m.Library, l)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// clampMS converts microseconds to milliseconds, keeping the value positive
// for the log axis (floor 1µs).
func clampMS(us float64) float64 {
	if us < 1 {
		us = 1
	}
	return us / 1000
}

// logTicks marks the integer multiples of each power of ten on a log
// axis and labels 1, 2 and 5 times them (every mark when that would
// label fewer than two): gonum's LogTicks labels the powers alone, which
// leaves an axis spanning less than a decade unlabelled.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return nil
	}
	var ts []plot.Tick
	labelled := 0
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		p := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = tickLabel(v, e)
				labelled++
			}
			ts = append(ts, t)
		}
	}
	if labelled < 2 {
		for i := range ts {
			ts[i].Label = tickLabel(ts[i].Value, math.Floor(math.Log10(ts[i].Value)))
		}
	}
	return ts
}

// tickLabel writes v, a multiple of 10^e, with the decimals it needs.
func tickLabel(v, e float64) string {
	return strconv.FormatFloat(v, 'f', max(0, int(-e)), 64)
}
