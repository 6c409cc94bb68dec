package policy

import (
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
)

const bandsPolicy = `domains:
  llm:
    - name: tokens
      match: [{key: user_id}]
      limits:
        - {capacity: 20000, refill: 20000/m}
        - {capacity: 1000000, refill: 1000000/d}
      charge: after_response
    - name: requests
      match: [{key: ip}]
      limits:
        - {capacity: 10, refill: 1/s}
      cost: 2
`

func TestParseBands(t *testing.T) {
	p := mustParse(t, bandsPolicy)
	r := p.Rule("llm", "tokens")
	if len(r.Bands) != 2 || r.Version != r.Bands[0].Version || r.Bands[0].Version == r.Bands[1].Version {
		t.Fatalf("bands %+v, version %p", r.Bands, r.Version)
	}
	for i, want := range []struct{ capacity, debt int64 }{{20000, 20000}, {1000000, 1000000}} {
		pr := r.Bands[i].Version.Params
		if pr.Capacity() != want.capacity || pr.MaxDebt() != want.debt {
			t.Errorf("band %d: capacity %d, max_debt %d; want %d, %d (each band's own burst of debt)", i, pr.Capacity(), pr.MaxDebt(), want.capacity, want.debt)
		}
	}
	one := p.Rule("llm", "requests")
	if len(one.Bands) != 1 || one.Cost != 2 || one.MaxCost != 10 {
		t.Errorf("one band: %d bands, cost %d, max_cost %d", len(one.Bands), one.Cost, one.MaxCost)
	}
	short := mustParse(t, "domains:\n  d:\n    - name: r\n      match: [{key: a}]\n      capacity: 5\n      refill: 1/s\n").Rule("d", "r")
	if len(short.Bands) != 1 || short.Version != short.Bands[0].Version || short.Version.Params.Capacity() != 5 {
		t.Errorf("the shorthand is one band: %+v", short.Bands)
	}
	// The first band's key is the rule's key (the shorthand's buckets are
	// its first band's); the others differ from it and from each other.
	e := entries("user_id", "alice")
	k0, k1 := string(r.AppendBandKey(nil, e, 0, 0)), string(r.AppendBandKey(nil, e, 1, 0))
	if k0 != string(r.AppendKey(nil, e)) || k1 == k0 || strings.HasPrefix(string(r.AppendKey(nil, entries("user_id", "alice#"))), k1) {
		t.Errorf("band keys %q, %q", k0, k1)
	}
}

// TestParseBandErrors: each bad limits input is refused with the file, the
// line, the rule and the field.
func TestParseBandErrors(t *testing.T) {
	rule := func(extra string) string {
		return "domains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n" + extra
	}
	for _, c := range []struct{ name, src, want string }{
		{"mixing forms", rule("      capacity: 10\n      limits:\n        - {capacity: 10, refill: 1/s}\n"),
			`policy.yaml:5: domain "edge" rule "r": capacity: not allowed with limits`},
		{"mixing refill", rule("      refill: 1/s\n      limits:\n        - {capacity: 10, refill: 1/s}\n"),
			`policy.yaml:5: domain "edge" rule "r": refill: not allowed with limits`},
		{"band without capacity", rule("      limits:\n        - {capacity: 10, refill: 1/s}\n        - {refill: 1/s}\n"),
			`policy.yaml:7: domain "edge" rule "r": limits[2].capacity: missing`},
		{"band with a bad refill", rule("      limits:\n        - {capacity: 10, refill: 1/q}\n"),
			`policy.yaml:6: domain "edge" rule "r": limits[1].refill: rate "1/q": period must be`},
		{"band of capacity 0", rule("      limits:\n        - {capacity: 0, refill: 1/s}\n"),
			`policy.yaml:6: domain "edge" rule "r": limits[1].capacity: 0: a limit allows at least one token`},
		{"band capacity too large", rule("      limits:\n        - {capacity: 1000000000000001, refill: 1/s}\n"),
			`limits[1].capacity: capacity 1000000000000001 out of range`},
		{"unknown band field", rule("      limits:\n        - {capacity: 1, refill: 1/s, burst: 2}\n"),
			`policy.yaml:6: domain "edge" rule "r": limits[1]: unknown field "burst"`},
		{"empty limits", rule("      limits: []\n"), `policy.yaml:5: domain "edge" rule "r": limits: want a list of 1 to 4 limits`},
		{"too many", rule("      limits:\n" + strings.Repeat("        - {capacity: 1, refill: 1/s}\n", 5)), `limits: want a list of 1 to 4 limits`},
		{"not a list", rule("      limits: {capacity: 1, refill: 1/s}\n"), `limits: want a list of 1 to 4 limits, each {capacity, refill} or {budget, per, time_zone}, got a mapping`},
		{"cost over a band", rule("      cost: 6\n      limits:\n        - {capacity: 10, refill: 1/s}\n        - {capacity: 5, refill: 1/m}\n"),
			`policy.yaml:5: domain "edge" rule "r": cost: 6 exceeds capacity 5`},
		{"current_limit rate with bands", rule("      current_limit: {requests_per_unit: 1, unit: second}\n      limits:\n        - {capacity: 10, refill: 1/s}\n        - {capacity: 5, refill: 1/m}\n"),
			`current_limit: requests_per_unit and unit: not with several limits`},
		{"on an unlimited rule", rule("      unlimited: true\n      limits:\n        - {capacity: 10, refill: 1/s}\n"),
			`limits: not allowed on an unlimited rule`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

// TestCompileBands: each band versions apart, by position.
func TestCompileBands(t *testing.T) {
	src := func(bands ...string) string {
		s := "domains:\n  d:\n    - name: r\n      match: [{key: a}]\n      on_resize: scale\n      limits:\n"
		for _, b := range bands {
			s += "        - " + b + "\n"
		}
		return s
	}
	var c Compiler
	compile := func(prev *Policy, s string) *Policy {
		t.Helper()
		p, err := c.Compile("p.yaml", []byte(s), prev, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Activate()
		return p
	}
	p1 := compile(nil, src("{capacity: 10, refill: 1/s}", "{capacity: 100, refill: 1/m}"))
	b1 := p1.Rule("d", "r").Bands
	// Band 2 changes: band 1 keeps its version, band 2 converts.
	p2 := compile(p1, src("{capacity: 10, refill: 1/s}", "{capacity: 200, refill: 1/m}", "{capacity: 5, refill: 5/h}"))
	b2 := p2.Rule("d", "r").Bands
	if b2[0].Version != b1[0].Version {
		t.Error("an unchanged band got a new version")
	}
	if v := b2[1].Version; v == b1[1].Version || v.Lineage() != b1[1].Version.Lineage() || v.OnResize != bucket.Scale || v.Prev().ID != b1[1].Version.ID {
		t.Errorf("a changed band: version %+v, want the next of the old one, under on_resize scale", v)
	}
	if v := b2[2].Version; v.Prev() != nil || v.Lineage() == b1[0].Version.Lineage() || v.Lineage() == b1[1].Version.Lineage() {
		t.Error("a new band must start a lineage of its own")
	}
	// Back to one band: the others are removed when the policy serves.
	p3 := compile(p2, src("{capacity: 10, refill: 1/s}"))
	if b2[0].Version.Lineage().Removed() || !b2[1].Version.Lineage().Removed() || !b2[2].Version.Lineage().Removed() {
		t.Error("removed bands are not removed, or the kept one is")
	}
	if p3.Rule("d", "r").Version != b1[0].Version {
		t.Error("the kept band changed version")
	}
}

// TestBandsRoundTrip: NativeYAML writes limits back, and the result
// compiles to the same bands.
func TestBandsRoundTrip(t *testing.T) {
	p := mustParse(t, bandsPolicy)
	out, err := p.NativeYAML()
	if err != nil {
		t.Fatal(err)
	}
	q := mustParse(t, string(out))
	for _, name := range []string{"tokens", "requests"} {
		a, b := p.Rule("llm", name), q.Rule("llm", name)
		if len(a.Bands) != len(b.Bands) || a.Charge != b.Charge || a.Cost != b.Cost || a.MaxCost != b.MaxCost {
			t.Fatalf("%s: round trip differs:\n%s", name, out)
		}
		for i := range a.Bands {
			if a.Bands[i].Version.Params != b.Bands[i].Version.Params {
				t.Errorf("%s band %d: %v, want %v", name, i, b.Bands[i].Version.Params, a.Bands[i].Version.Params)
			}
		}
	}
	expl := p.Explain("llm", entries("user_id", "a")).String()
	for _, w := range []string{"limits [capacity 20000, refill 20000/m; capacity 1000000, refill 1000000/d]", "max_debt 20000; 1000000", "decided together"} {
		if !strings.Contains(expl, w) {
			t.Errorf("explain lacks %q:\n%s", w, expl)
		}
	}
}

// TestBandsOtherCharges: limits with charge: every_hit and with a reserve
// bound each band's debt by its own capacity, explain as decided
// together, and export and read back to the same rules.
func TestBandsOtherCharges(t *testing.T) {
	p := mustParse(t, "request_id_key: rid\ndomains:\n  edge:\n"+
		"    - {name: hits, match: [{key: org}], charge: every_hit, limits: [{capacity: 10, refill: 10/m}, {budget: 30, per: day}]}\n"+
		"    - {name: held, match: [{key: team}], charge: after_response, reserve: 20, limits: [{capacity: 100, refill: 100/m}, {capacity: 50, refill: 50/h}]}\n")
	for _, c := range []struct {
		rule  string
		debts []int64
		cost  int64
	}{{"hits", []int64{10, 30}, 1}, {"held", []int64{100, 50}, 0}} {
		r := p.Rule("edge", c.rule)
		for i, b := range r.Bands {
			if d := b.Version.Params.MaxDebt(); d != c.debts[i] {
				t.Errorf("%s band %d: max_debt %d, want %d", c.rule, i, d, c.debts[i])
			}
		}
		if r.Cost != c.cost || r.MaxCost != 0 {
			t.Errorf("%s: cost %d, max_cost %d, want %d and 0", c.rule, r.Cost, r.MaxCost, c.cost)
		}
	}
	want := "a report is charged on every one, and the descriptor is OVER_LIMIT when any one is"
	for _, c := range []struct{ key, debts string }{{"org", "max_debt 10; 30"}, {"team", "max_debt 100; 50"}} {
		if out := p.Explain("edge", entries(c.key, "x")).String(); !strings.Contains(out, want) || !strings.Contains(out, c.debts) {
			t.Errorf("explain of %s:\n%s", c.key, out)
		}
	}
	out, err := p.NativeYAML()
	if err != nil {
		t.Fatal(err)
	}
	back := mustParse(t, string(out))
	for _, name := range []string{"hits", "held"} {
		r, z := p.Rule("edge", name), back.Rule("edge", name)
		if z.Charge != r.Charge || z.Reserve != r.Reserve || z.Cost != r.Cost || len(z.Bands) != len(r.Bands) {
			t.Fatalf("%s exported as\n%s", name, out)
		}
		for i := range r.Bands {
			if z.Bands[i].Version.Params != r.Bands[i].Version.Params {
				t.Errorf("%s band %d: read back as %+v, was %+v", name, i, z.Bands[i].Version.Params, r.Bands[i].Version.Params)
			}
		}
	}
}
