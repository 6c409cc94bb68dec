package simulate

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Limits that keep a figure legible.
const (
	maxBins      = 1000 // points per line; longer traces are binned
	maxPlotRules = 6    // per policy, the rules with the most decisions
)

// WritePNG draws the results on one figure, a PNG: allowed per second of
// each rule, rejected (and refused) per second, and, when buckets were
// followed, the fewest tokens each held per second. A rule has one colour;
// the first policy is drawn solid, a second (--compare) dashed. A trace
// longer than maxBins seconds is drawn in bins of whole seconds, each
// point the mean per second of its bin and, for tokens, the bin's least.
func WritePNG(w io.Writer, results []*Result) error {
	var end int64
	for _, r := range results {
		end = max(end, r.End/1e9)
	}
	width := max(1, (end+1+maxBins-1)/maxBins) // seconds per bin
	bins := end/width + 1
	unit := "per second"
	if width > 1 {
		unit = fmt.Sprintf("per second (mean of %d s)", width)
	}
	allowed, rejected := newPanel("allowed "+unit), newPanel("rejected "+unit+", refused included")
	tokens := newPanel("fewest tokens in the hottest buckets")
	colours := map[ruleKey]int{}
	followed := false
	names := shortNames(results)
	for i, r := range results {
		prefix := ""
		if len(results) > 1 {
			prefix = names[i] + " "
		}
		for _, rr := range plotted(r.Rules) {
			k := ruleKey{rr.Domain, rr.Rule}
			if _, ok := colours[k]; !ok {
				colours[k] = len(colours)
			}
			a, rj := rateLines(rr.Series, width, bins)
			name := prefix + rr.Domain + "/" + rr.Rule
			if err := allowed.addLine(name, a, colours[k], i); err != nil {
				return err
			}
			if err := rejected.addLine(name, rj, colours[k], i); err != nil {
				return err
			}
		}
		for j, b := range r.Buckets {
			followed = true
			if err := tokens.addLine(prefix+b.Label, tokenLine(b.Tokens, width), j, i); err != nil {
				return err
			}
		}
	}
	for _, p := range []*panel{allowed, rejected, tokens} {
		p.X.Max = float64(bins * width)
		// Room above the lines for the legend, one line per entry.
		p.Y.Max = max(p.Y.Max, 1) * (1.1 + 0.07*float64(p.entries))
	}
	rows := [][]*plot.Plot{{allowed.Plot}, {rejected.Plot}}
	if followed {
		rows = append(rows, []*plot.Plot{tokens.Plot})
	}
	allowed.Title.Text = "tokengate simulate: " + strings.Join(names, " (solid) vs ")
	if len(results) > 1 {
		allowed.Title.Text += " (dashed)"
	}
	img := vgimg.NewWith(vgimg.UseWH(11*vg.Inch, vg.Length(3.2*float64(len(rows)))*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 6}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// panel is one plot of the figure and the number of its legend entries.
type panel struct {
	*plot.Plot
	entries int
}

// shortNames are the policies' file names without their directories,
// unless that makes two alike.
func shortNames(results []*Result) []string {
	names := make([]string, len(results))
	for i, r := range results {
		names[i] = filepath.Base(r.Policy)
		if slices.Contains(names[:i], names[i]) {
			for j, r := range results {
				names[j] = r.Policy
			}
			break
		}
	}
	return names
}

func newPanel(y string) *panel {
	p := &panel{Plot: plot.New()}
	p.X.Label.Text = "seconds from the start of the trace"
	p.Y.Label.Text = y
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Y.Tick.Marker = plainTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// plotted are the rules with the most decisions, at most maxPlotRules, in
// their order.
func plotted(rules []*RuleResult) []*RuleResult {
	if len(rules) <= maxPlotRules {
		return rules
	}
	top := slices.Clone(rules)
	slices.SortStableFunc(top, func(a, b *RuleResult) int { return cmp.Compare(b.decisions(), a.decisions()) })
	top = top[:maxPlotRules]
	slices.SortFunc(top, func(a, b *RuleResult) int { return a.order - b.order })
	return top
}

// rateLines are a rule's allowed and rejected per second, bin by bin
// (zero in a bin without decisions), as steps that hold over each bin.
func rateLines(series []Second, width, bins int64) (plotter.XYs, plotter.XYs) {
	a, r := make(plotter.XYs, bins+1), make(plotter.XYs, bins+1)
	for i := range a {
		a[i].X, r[i].X = float64(int64(i)*width), float64(int64(i)*width)
	}
	for _, s := range series {
		b := s.At / width
		a[b].Y += float64(s.Allowed) / float64(width)
		r[b].Y += float64(s.Rejected) / float64(width)
	}
	a[bins].Y, r[bins].Y = a[bins-1].Y, r[bins-1].Y
	return a, r
}

// tokenLine is a bucket's fewest tokens per bin, for the bins in which it
// decided.
func tokenLine(ps []Point, width int64) plotter.XYs {
	var xys plotter.XYs
	for _, p := range ps {
		x := float64(p.At / width * width)
		if n := len(xys); n > 0 && xys[n-1].X == x {
			xys[n-1].Y = min(xys[n-1].Y, float64(p.Value))
			continue
		}
		xys = append(xys, plotter.XY{X: x, Y: float64(p.Value)})
	}
	if n := len(xys); n > 0 {
		xys = append(xys, plotter.XY{X: xys[n-1].X + float64(width), Y: xys[n-1].Y})
	}
	return xys
}

// addLine draws xys in colour number colour, solid for the first policy
// and dashed for the second.
func (p *panel) addLine(name string, xys plotter.XYs, colour, policy int) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.StepStyle = plotter.PostStep
	l.Color = plotutil.DarkColors[colour%len(plotutil.DarkColors)]
	l.Width = vg.Points(1.5)
	if policy > 0 {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	p.entries++
	return nil
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
