package report

import (
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// saveTiles draws plots in rows of cols tiles of w x h each into one PNG
// at path; nothing is written when there is no plot.
func saveTiles(path string, ps []*plot.Plot, cols int, w, h vg.Length) error {
	if len(ps) == 0 {
		return nil
	}
	cols = min(cols, len(ps))
	rows := (len(ps) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range cols {
			if i := r*cols + c; i < len(ps) {
				grid[r][c] = ps[i]
			}
		}
	}
	img := vgimg.New(w*vg.Length(cols), h*vg.Length(rows))
	dc := draw.New(img)
	pad := vg.Points(6)
	canvases := plot.Align(grid, draw.Tiles{Rows: rows, Cols: cols, PadX: pad, PadY: pad, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}, dc)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
