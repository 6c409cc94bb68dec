package simulate

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tokengate/tokengate/pkg/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/plot-layout.golden")

// layoutPolicy has buckets of 1000, 5 and 2 tokens: on one axis the two
// small ones would be drawn flat at 0; and a post-paid budget of 100
// tokens that may go 400 below zero.
const layoutPolicy = `domains:
  edge:
    - name: global
      match: [{key: path}]
      capacity: 1000
      refill: 20/s
    - name: per-user
      match: [{key: user}]
      capacity: 5
      refill: 2/s
    - name: login
      match: [{key: user}, {key: action, value: login}]
      capacity: 2
      refill: 1/5s
      shadow: true
    - name: llm-tokens
      match: [{key: model}]
      capacity: 100
      refill: 10/s
      charge: after_response
      max_debt: 400
`

// layoutTrace is 30 s of a steady user, one in bursts every 10 s, logins,
// a batch path that spends 10 tokens a request for 2 s, and checks of a
// model's budget every 100 ms with a report of 60 tokens each second:
// down to -400, the max_debt, and forgiven beyond.
func layoutTrace() []byte {
	var b strings.Builder
	b.WriteString(header)
	for ms := int64(0); ms < 30_000; ms += 50 {
		at := FormatSeconds(ms * 1e6)
		if ms%600 == 0 {
			b.WriteString(at + ",edge,path=/api|user=alice,\n")
		}
		if ms%10_000 < 1500 {
			b.WriteString(at + ",edge,path=/api|user=bursty,\n")
		}
		if ms%1000 == 0 && ms%15_000 < 3000 {
			b.WriteString(at + ",edge,user=bob;action=login,\n")
		}
		if ms%20_000 < 2000 {
			b.WriteString(at + ",edge,path=/batch,10\n")
		}
		if ms%100 == 0 {
			b.WriteString(at + ",edge,model=m,0\n")
		}
		if ms%1000 == 500 {
			b.WriteString(at + ",edge,model=m,60\n")
		}
	}
	return []byte(b.String())
}

// TestPlotLayout: what the figure shows and where, not its pixels: the
// legend right of every panel's data and level with the first one's top,
// one colour per rule in every panel (palette order: first drawn, first
// coloured), a linear axis from 0 (-max_debt for a post-paid rule) to its
// rule's capacity in a panel per bucket, titles that name the rule (or
// bucket) and the unit. The description is testdata/plot-layout.golden;
// -update rewrites it.
func TestPlotLayout(t *testing.T) {
	pols := []*policy.Policy{parsePolicy(t, "live.yaml", layoutPolicy),
		parsePolicy(t, "raised.yaml", strings.Replace(layoutPolicy, "capacity: 5\n", "capacity: 10\n", 1))}
	res, err := Run(context.Background(), BytesTrace("t.csv", layoutTrace()), pols, RunOptions{Hot: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := layout(res)
	img := vgimg.NewWith(vgimg.UseWH(figureWidth, f.height()), vgimg.UseDPI(96))
	d, err := f.lay(draw.New(img))
	if err != nil {
		t.Fatal(err)
	}
	got := describeLayout(f, d)
	path := filepath.Join("testdata", "plot-layout.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the figure's layout differs from %s (go test ./pkg/simulate -run TestPlotLayout -update, then look at the PNG):\n%s", path, got)
	}
}

// describeLayout writes what the golden file holds: the figure's size and
// title; where the legend is, measured on the laid-out canvas, and its
// entries with their colours; each panel's title, axes as drawn (label,
// scale, range), the range of its data and its lines.
func describeLayout(f *figure, d *drawing) string {
	var b strings.Builder
	fmt.Fprintf(&b, "figure %.1f x %.1f in: %q\n", figureWidth/vg.Inch, f.height()/vg.Inch, f.Title)
	right := true
	dataTop := d.rates[0][0].DataCanvas(d.rateTiles[0][0]).Max.Y
	d.eachPanel(func(p *plot.Plot, c draw.Canvas) {
		right = right && d.legendCanvas.Min.X >= p.DataCanvas(c).Max.X
	})
	level := d.legendCanvas.Max.Y == dataTop
	width := d.legend.Rectangle(d.legendCanvas).Size().X
	fits := width <= d.legendCanvas.Size().X
	fmt.Fprintf(&b, "legend: right of every panel's data %v, top level with the first panel's data %v, fits its column %v, text after the lines %v\n",
		right, level, fits, d.legend.Left)
	for _, e := range f.Legend {
		fmt.Fprintf(&b, "  %s %s\n", style(e.Colour, e.Dashed), e.Text)
	}
	for _, g := range []struct {
		name   string
		panels []*panel
		plots  [][]*plot.Plot
	}{{"rates, one a row", f.Rates, d.rates}, {fmt.Sprintf("buckets, %d a row", bucketCols), f.Buckets, d.buckets}} {
		fmt.Fprintf(&b, "%s:\n", g.name)
		var plots []*plot.Plot
		for _, row := range g.plots {
			plots = append(plots, row...)
		}
		for i, p := range g.panels {
			pl := plots[i]
			fmt.Fprintf(&b, "  %q\n", pl.Title.Text)
			for _, a := range []struct {
				name string
				ax   plot.Axis
			}{{"x", pl.X}, {"y", pl.Y}} {
				fmt.Fprintf(&b, "    %s %q %T %.6g..%.6g\n", a.name, a.ax.Label.Text, a.ax.Scale, a.ax.Min, a.ax.Max)
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, l := range p.Lines {
				for _, xy := range l.XYs {
					lo, hi = min(lo, xy.Y), max(hi, xy.Y)
				}
			}
			fmt.Fprintf(&b, "    data y %.6g..%.6g\n", lo, hi)
			fmt.Fprintf(&b, "    lines:")
			for j := 0; j < len(p.Lines); {
				k := j
				for k < len(p.Lines) && p.Lines[k].Colour == p.Lines[j].Colour && p.Lines[k].Dashed == p.Lines[j].Dashed {
					k++
				}
				fmt.Fprintf(&b, " %s x%d", style(p.Lines[j].Colour, p.Lines[j].Dashed), k-j)
				j = k
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// style names a line style as the golden file shows it: the palette
// entry and its colour, or black.
func style(colour int, dashed bool) string {
	s := "black"
	if colour >= 0 {
		r, g, b, _ := palette[colour%len(palette)].RGBA()
		s = fmt.Sprintf("colour %d #%02x%02x%02x", colour, r>>8, g>>8, b>>8)
	}
	if dashed {
		return s + " dashed"
	}
	return s + " solid"
}
