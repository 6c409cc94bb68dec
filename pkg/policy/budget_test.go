package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/clock"
)

func madrid(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestBudgetBounds: periods are calendar days, weeks and months in the
// zone, found from monotonic readings through a fixed anchor: exact across
// month ends and the DST days of 23 and 25 hours.
func TestBudgetBounds(t *testing.T) {
	loc := madrid(t)
	// Reading 0 is 2026-01-01 00:00 in Madrid.
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
	anchor := clock.AnchorAt(epoch, 0)
	at := func(y int, m time.Month, d, h, min int) int64 {
		return time.Date(y, m, d, h, min, 0, 0, loc).Sub(epoch).Nanoseconds()
	}
	for _, c := range []struct {
		name       string
		per        Per
		now        int64
		start, end int64
	}{
		{"a month's last minute", PerMonth, at(2026, 1, 31, 23, 59), at(2026, 1, 1, 0, 0), at(2026, 2, 1, 0, 0)},
		{"the next month's first", PerMonth, at(2026, 2, 1, 0, 0), at(2026, 2, 1, 0, 0), at(2026, 3, 1, 0, 0)},
		{"February", PerMonth, at(2026, 2, 28, 12, 0), at(2026, 2, 1, 0, 0), at(2026, 3, 1, 0, 0)},
		{"December to January", PerMonth, at(2026, 12, 31, 23, 0), at(2026, 12, 1, 0, 0), at(2027, 1, 1, 0, 0)},
		{"the spring DST day", PerDay, at(2026, 3, 29, 12, 0), at(2026, 3, 29, 0, 0), at(2026, 3, 30, 0, 0)},
		{"the autumn DST day", PerDay, at(2026, 10, 25, 12, 0), at(2026, 10, 25, 0, 0), at(2026, 10, 26, 0, 0)},
		{"a week from Monday", PerWeek, at(2026, 3, 29, 23, 0), at(2026, 3, 23, 0, 0), at(2026, 3, 30, 0, 0)},
		{"a Monday", PerWeek, at(2026, 3, 30, 0, 0), at(2026, 3, 30, 0, 0), at(2026, 4, 6, 0, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Budget{Per: c.per, Location: loc, anchor: anchor}
			start, end := b.Bounds(c.now)
			if start != c.start || end != c.end {
				t.Fatalf("bounds %v..%v, want %v..%v", time.Duration(start), time.Duration(end), time.Duration(c.start), time.Duration(c.end))
			}
			if b.End(c.now) != end {
				t.Error("End differs from Bounds")
			}
		})
	}
	day := &Budget{Per: PerDay, Location: loc, anchor: anchor}
	for _, c := range []struct {
		day  int
		want time.Duration
	}{{29, 23 * time.Hour}, {28, 24 * time.Hour}} {
		s, e := day.Bounds(at(2026, 3, c.day, 12, 0))
		if time.Duration(e-s) != c.want {
			t.Errorf("March %d lasts %v, want %v", c.day, time.Duration(e-s), c.want)
		}
	}
	if s, e := day.Bounds(at(2026, 10, 25, 1, 0)); time.Duration(e-s) != 25*time.Hour {
		t.Errorf("October 25 lasts %v, want 25h", time.Duration(e-s))
	}
}

// TestBudgetAnchorOnly: periods depend on the anchor and the monotonic
// reading alone. Two anchors taken of one clock an hour apart in wall time
// (the wall clock stepped) but for the same readings are different
// anchors; one anchor, kept, maps a reading to one period whatever the
// wall clock does meanwhile, and a clock.Monotonic's anchor never moves.
func TestBudgetAnchorOnly(t *testing.T) {
	m := clock.NewMonotonic()
	a := m.Anchor()
	m.Now()
	if m.Anchor() != a {
		t.Fatal("a monotonic clock's anchor moved")
	}
	b := &Budget{Per: PerDay, Location: time.UTC, anchor: clock.AnchorAt(time.Date(2026, 5, 1, 23, 0, 0, 0, time.UTC), 0)}
	s1, e1 := b.Bounds(int64(30 * time.Minute))
	s2, e2 := b.Bounds(int64(30 * time.Minute))
	if s1 != s2 || e1 != e2 || time.Duration(e1) != time.Hour {
		t.Errorf("bounds %v..%v then %v..%v: the period must end at reading 1h", time.Duration(s1), time.Duration(e1), time.Duration(s2), time.Duration(e2))
	}
}

func TestParseBudgetErrors(t *testing.T) {
	rule := func(band string) string {
		return "domains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n      limits:\n        - " + band + "\n"
	}
	for _, c := range []struct{ name, src, want string }{
		{"bad per", rule("{budget: 10, per: year}"), `policy.yaml:6: domain "edge" rule "r": limits[1].per: "year": want day, week or month`},
		{"no per", rule("{budget: 10}"), `policy.yaml:6: domain "edge" rule "r": limits[1].per: missing: day, week or month`},
		{"bad time_zone", rule("{budget: 10, per: day, time_zone: Mars/Olympus}"), `policy.yaml:6: domain "edge" rule "r": limits[1].time_zone: unknown time zone Mars/Olympus`},
		{"Local", rule("{budget: 10, per: day, time_zone: Local}"), `limits[1].time_zone: "Local" is the host's zone`},
		{"budget with refill", rule("{budget: 10, per: day, refill: 1/s}"), `policy.yaml:6: domain "edge" rule "r": limits[1].refill: not with budget`},
		{"budget with capacity", rule("{budget: 10, per: day, capacity: 5}"), `limits[1].capacity: not with budget`},
		{"per without budget", rule("{capacity: 10, refill: 1/s, per: day}"), `limits[1].per: only with budget`},
		{"budget 0", rule("{budget: 0, per: day}"), `limits[1].budget: budget 0 out of range`},
		{"budget not a number", rule("{budget: lots, per: day}"), `limits[1].budget: want a whole number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
	p := mustParse(t, rule("{budget: 1000000, per: month, time_zone: Europe/Madrid}"))
	r := p.Rule("edge", "r")
	if !r.HasBudget() || r.Bands[0].Version.Horizon == nil || r.Bands[0].Version.Params.Refills() {
		t.Fatalf("a budget band: %+v", r.Bands[0])
	}
	out, err := p.NativeYAML()
	if err != nil || !strings.Contains(string(out), "budget: 1000000") || !strings.Contains(string(out), "time_zone: Europe/Madrid") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if q := mustParse(t, string(out)); q.Rule("edge", "r").Bands[0].Budget.Per != PerMonth {
		t.Error("the exported budget does not read back")
	}
}

// TestNoWallClockInDecisions: nothing a decision runs reads the wall
// clock (time.Now, time.Since, time.Until): periods come from the
// store's monotonic reading through the anchor taken once in cmd/, so a
// step of the wall clock moves no boundary.
func TestNoWallClockInDecisions(t *testing.T) {
	for _, dir := range []string{".", "../bucket", "../service", "../store", "../store/memory", "../clock"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (%d files)", dir, err, len(files))
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				reads := ok && id.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until")
				// The monotonic clock itself is the one reader (pkg/clock).
				if reads && name != filepath.Join("../clock", "clock.go") {
					t.Errorf("%s reads the wall clock: time.%s", name, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
