package simulate

// The figure WritePNG draws is decided first, as plain values (layout:
// panels, titles, lines, colours, the legend), and then drawn with
// gonum/plot (plotdraw.go). plot_test.go checks the layout against a
// golden file and the drawn geometry (the legend beside the data, never
// on it), not pixels.

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Limits that keep a figure legible.
const (
	maxBins      = 1000 // points per line; longer traces are binned
	maxPlotRules = 6    // per policy, the rules with the most decisions
	bucketCols   = 3    // bucket panels side by side
)

// WritePNG draws the results on one figure, a PNG: allowed per second of
// each rule, rejected (and refused) per second, and, when buckets were
// followed, one panel per bucket with the lowest balance it held in each
// second it decided, from 0 (-max_debt for a rule charged after the
// response or every hit, which may take it below zero) to its rule's
// capacity (one axis for all would flatten a 5-token bucket beside a
// 1000-token one, and a log axis cannot show the 0 of a dry bucket or a
// debt). A rule has one colour in every panel, named
// once in the legend right of the panels; the first policy is drawn solid,
// a second (--compare) dashed. A trace longer than maxBins seconds is
// drawn in bins of whole seconds, each point the mean per second of its
// bin and, for tokens, the bin's least.
func WritePNG(w io.Writer, results []*Result) error {
	f := layout(results)
	img := vgimg.NewWith(vgimg.UseWH(figureWidth, f.height()), vgimg.UseDPI(96))
	if err := f.draw(draw.New(img)); err != nil {
		return err
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// figure is what WritePNG draws.
type figure struct {
	Title string
	// Legend is drawn once, right of every panel: a line per rule in its
	// colour, then with several policies a black line per policy in its
	// style.
	Legend []legendEntry
	// Rates are the allowed and rejected panels, one a row; Buckets the
	// followed buckets' panels, bucketCols a row.
	Rates, Buckets []*panel
}

// panel is one plot of the figure; every axis is linear, from 0 but a
// bucket's y axis, from YMin.
type panel struct {
	Title, XLabel, YLabel string
	XMax                  float64
	YMin, YMax            float64 // YMax 0: from the data
	Lines                 []line
}

// line is one line of a panel: a rule's (or its bucket's) in the rule's
// colour, dashed for the second policy.
type line struct {
	Colour int // in palette
	Dashed bool
	XYs    plotter.XYs
}

// legendEntry is a colour (a rule) or, with Colour -1, a line style (a
// policy).
type legendEntry struct {
	Text   string
	Colour int
	Dashed bool
}

// layout decides the figure for results.
func layout(results []*Result) *figure {
	var end int64
	for _, r := range results {
		end = max(end, r.End/1e9)
	}
	width := max(1, (end+1+maxBins-1)/maxBins) // seconds per bin
	bins := end/width + 1
	xMax := float64(bins * width)
	xLabel := "seconds from the start of the trace"
	rate, each := "decisions / s", "each second"
	if width > 1 {
		rate = fmt.Sprintf("decisions / s, mean of each %d s", width)
		each = fmt.Sprintf("each %d s", width)
	}
	names := shortNames(results)
	f := &figure{Title: "tokengate simulate: " + strings.Join(names, " (solid) vs ")}
	if len(results) > 1 {
		f.Title += " (dashed)"
	}
	allowed := &panel{Title: "Allowed decisions per second, by rule", XLabel: xLabel, YLabel: rate, XMax: xMax}
	rejected := &panel{Title: "Rejected and refused decisions per second, by rule", XLabel: xLabel, YLabel: rate, XMax: xMax}
	f.Rates = []*panel{allowed, rejected}
	pal := newColours(results)
	for i, r := range results {
		for _, rr := range plotted(r.Rules) {
			c := pal.of(ruleKey{rr.Domain, rr.Rule})
			a, rj := rateLines(rr.Series, width, bins)
			allowed.Lines = append(allowed.Lines, line{c, i > 0, a})
			rejected.Lines = append(rejected.Lines, line{c, i > 0, rj})
		}
	}
	byLabel := map[string]*panel{}
	capacities := map[string][]string{}
	for i, r := range results {
		for _, b := range r.Buckets {
			p := byLabel[b.Label]
			if p == nil {
				p = &panel{XLabel: xLabel, YLabel: "tokens", XMax: xMax}
				byLabel[b.Label] = p
				f.Buckets = append(f.Buckets, p)
			}
			// A little room above a full bucket's line, and below the
			// deepest debt.
			room := float64(b.Capacity+b.MaxDebt) * 0.04
			p.YMax = max(p.YMax, float64(b.Capacity)+room)
			if b.MaxDebt > 0 {
				p.YMin = min(p.YMin, -float64(b.MaxDebt)-room)
				p.YLabel = "tokens (below 0: debt)"
			}
			limits := fmt.Sprint(b.Capacity)
			if b.MaxDebt > 0 {
				limits += fmt.Sprintf(", max_debt %d", b.MaxDebt)
			}
			if !slices.Contains(capacities[b.Label], limits) {
				capacities[b.Label] = append(capacities[b.Label], limits)
			}
			c := pal.of(ruleKey{b.Domain, b.Rule})
			for _, xys := range tokenLines(b.Tokens, width) {
				p.Lines = append(p.Lines, line{c, i > 0, xys})
			}
		}
	}
	for label, p := range byLabel {
		sep := ", " // a bucket that may go into debt says so on a line of its own
		if p.YMin < 0 {
			sep = "\n"
		}
		p.Title = label + "\nlowest balance " + each + sep + "capacity " + strings.Join(capacities[label], " vs ")
	}
	f.Legend = pal.legend()
	if len(results) > 1 {
		for i, n := range names {
			f.Legend = append(f.Legend, legendEntry{Text: n, Colour: -1, Dashed: i > 0})
		}
	}
	return f
}

// colours gives each rule its palette colour, in the order rules are
// first drawn: the plotted rules of each policy, then the rules of
// followed buckets not plotted.
type colours struct {
	index  map[ruleKey]int
	order  []ruleKey
	shadow map[ruleKey]bool
}

func newColours(results []*Result) *colours {
	c := &colours{index: map[ruleKey]int{}, shadow: map[ruleKey]bool{}}
	for _, r := range results {
		for _, rr := range r.Rules {
			c.shadow[ruleKey{rr.Domain, rr.Rule}] = rr.Shadow
		}
	}
	return c
}

func (c *colours) of(k ruleKey) int {
	i, ok := c.index[k]
	if !ok {
		i = len(c.order)
		c.index[k] = i
		c.order = append(c.order, k)
	}
	return i
}

// legend is an entry per rule, in colour order.
func (c *colours) legend() []legendEntry {
	out := make([]legendEntry, len(c.order))
	for i, k := range c.order {
		out[i] = legendEntry{Text: k.domain + "/" + k.rule, Colour: i}
		if c.shadow[k] {
			out[i].Text += " (shadow)"
		}
	}
	return out
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

// tokenLines are a bucket's lowest balance per bin, a line for each run of
// bins in which it decided, each point holding over its bin: between two
// runs nothing asked the bucket, and its balance there (refilling) is not
// drawn.
func tokenLines(ps []Point, width int64) []plotter.XYs {
	var out []plotter.XYs
	var run plotter.XYs
	end := func() {
		if n := len(run); n > 0 {
			out = append(out, append(run, plotter.XY{X: run[n-1].X + float64(width), Y: run[n-1].Y}))
		}
		run = nil
	}
	for _, p := range ps {
		x := float64(p.At / width * width)
		if n := len(run); n > 0 && run[n-1].X == x {
			run[n-1].Y = min(run[n-1].Y, float64(p.Value))
			continue
		} else if n > 0 && run[n-1].X+float64(width) != x {
			end()
		}
		run = append(run, plotter.XY{X: x, Y: float64(p.Value)})
	}
	end()
	return out
}
