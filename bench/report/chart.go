package report

import (
	"fmt"
	"sort"

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
