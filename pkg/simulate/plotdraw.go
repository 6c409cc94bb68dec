package simulate

// Drawing a figure (plot.go) with gonum/plot: the panels' plots, where
// each goes on the canvas, the legend in a column of its own right of the
// panels, the title above them.

import (
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// palette are the rules' colours, by colours.of's order; past its end
// they repeat.
var palette = plotutil.DarkColors

// The figure's size.
const (
	figureWidth = 11 * vg.Inch
	titleHeight = 0.4 * vg.Inch
	rateHeight  = 2.8 * vg.Inch // each rate panel's row
	bucketRow   = 2.2 * vg.Inch // each row of bucket panels
	gap         = 2 * vg.Millimeter
)

// height is the figure's height: the title, a row per rate panel, a row
// per bucketCols bucket panels.
func (f *figure) height() vg.Length {
	return titleHeight + vg.Length(len(f.Rates))*rateHeight + vg.Length(bucketRows(len(f.Buckets)))*bucketRow
}

func bucketRows(n int) int { return (n + bucketCols - 1) / bucketCols }

// drawing is a figure built for one canvas: its plots, their tiles, and
// the legend's column.
type drawing struct {
	rates, buckets           [][]*plot.Plot // rows of columns; nil fills the last bucket row
	rateTiles, bucketTiles   [][]draw.Canvas
	legend                   plot.Legend
	legendCanvas, titleSpace draw.Canvas
}

// lay builds the figure's plots and places them on c: the legend as wide
// as its longest entry at the right, its top level with the first panel's
// data, the panels in what is left under the title.
func (f *figure) lay(c draw.Canvas) (*drawing, error) {
	d := &drawing{legend: f.legendOf()}
	for _, p := range f.Rates {
		pl, err := p.plot()
		if err != nil {
			return nil, err
		}
		d.rates = append(d.rates, []*plot.Plot{pl})
	}
	cols := min(len(f.Buckets), bucketCols)
	for i, p := range f.Buckets {
		pl, err := p.plot()
		if err != nil {
			return nil, err
		}
		if i%bucketCols == 0 {
			d.buckets = append(d.buckets, make([]*plot.Plot, cols))
		}
		d.buckets[len(d.buckets)-1][i%bucketCols] = pl
	}
	legendWidth := d.legend.Rectangle(c).Size().X + 2*gap
	d.titleSpace = draw.Crop(c, 0, 0, c.Size().Y-titleHeight, 0)
	panels := draw.Crop(c, 0, -legendWidth, 0, -titleHeight)
	rateSpace := draw.Crop(panels, 0, 0, panels.Size().Y-vg.Length(len(d.rates))*rateHeight, 0)
	d.rateTiles = plot.Align(d.rates, tiles(len(d.rates), 1), rateSpace)
	if len(d.buckets) > 0 {
		bucketSpace := draw.Crop(panels, 0, 0, 0, -rateSpace.Size().Y)
		d.bucketTiles = plot.Align(d.buckets, tiles(len(d.buckets), cols), bucketSpace)
	}
	top := d.rates[0][0].DataCanvas(d.rateTiles[0][0]).Max.Y
	d.legendCanvas = draw.Crop(c, c.Size().X-legendWidth+gap, -gap, 0, top-c.Max.Y)
	return d, nil
}

func tiles(rows, cols int) draw.Tiles {
	return draw.Tiles{Rows: rows, Cols: cols, PadTop: gap, PadBottom: gap, PadLeft: gap, PadRight: gap,
		PadX: 3 * gap, PadY: 3 * gap}
}

// draw draws the figure on c.
func (f *figure) draw(c draw.Canvas) error {
	d, err := f.lay(c)
	if err != nil {
		return err
	}
	title := text.Style{Font: font.From(plot.DefaultFont, 13), XAlign: draw.XCenter, YAlign: draw.YCenter,
		Handler: plot.DefaultTextHandler}
	c.FillText(title, d.titleSpace.Center(), f.Title)
	d.eachPanel(func(p *plot.Plot, c draw.Canvas) { p.Draw(c) })
	d.legend.Draw(d.legendCanvas)
	return nil
}

// plot is the panel as a gonum plot: linear axes from 0 (y from YMin), a
// grid, the lines as steps that hold over each second (or bin).
func (p *panel) plot() (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font.Size = vg.Points(11)
	pl.Title.Padding = gap
	pl.X.Label.Text, pl.Y.Label.Text = p.XLabel, p.YLabel
	pl.Y.Tick.Marker = plainTicks{}
	pl.Add(plotter.NewGrid())
	for _, l := range p.Lines {
		if len(l.XYs) == 0 {
			continue
		}
		pts, err := plotter.NewLine(l.XYs)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", p.Title, err)
		}
		pts.StepStyle = plotter.PostStep
		pts.LineStyle = lineStyle(l.Colour, l.Dashed)
		pl.Add(pts)
	}
	pl.X.Min, pl.X.Max = 0, p.XMax
	pl.Y.Min = p.YMin
	if p.YMax > 0 {
		pl.Y.Max = p.YMax
	} else {
		pl.Y.Max = max(pl.Y.Max, 1) * 1.05
	}
	return pl, nil
}

// legendOf is the figure's legend, text after the lines.
func (f *figure) legendOf() plot.Legend {
	l := plot.NewLegend()
	l.Left, l.Top = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	l.Padding = vg.Points(2)
	for _, e := range f.Legend {
		l.Add(e.Text, &plotter.Line{LineStyle: lineStyle(e.Colour, e.Dashed)})
	}
	return l
}

// lineStyle is colour number colour of the palette (-1: black), dashed
// or solid.
func lineStyle(colour int, dashed bool) draw.LineStyle {
	s := draw.LineStyle{Color: color.Black, Width: vg.Points(1.5)}
	if colour >= 0 {
		s.Color = palette[colour%len(palette)]
	}
	if dashed {
		s.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	return s
}

// plainTicks are the default ticks labelled as short numbers (25, not
// 25.00).
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 6, 64)
		}
	}
	return ts
}

// eachPanel calls do with each panel, rates then buckets, and its tile.
func (d *drawing) eachPanel(do func(*plot.Plot, draw.Canvas)) {
	for _, g := range []struct {
		plots [][]*plot.Plot
		tiles [][]draw.Canvas
	}{{d.rates, d.rateTiles}, {d.buckets, d.bucketTiles}} {
		for i, row := range g.plots {
			for j, p := range row {
				if p != nil {
					do(p, g.tiles[i][j])
				}
			}
		}
	}
}
