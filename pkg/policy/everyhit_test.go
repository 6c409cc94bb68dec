package policy

import (
	"strings"
	"testing"
)

const everyHitPolicy = `domains:
  llm:
    - name: tokens
      match: [{key: user_id}]
      capacity: 1000
      refill: 1000/h
      charge: every_hit
    - name: shared
      match: [{key: team}]
      capacity: 10
      refill: 1/s
      charge: every_hit
      cost: 2
      max_debt: 7
      quota: true
`

// A reference file, as Envoy Gateway renders a usage-based limit.
const everyHitReference = `domain: llm
descriptors:
  - key: user_id
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

func TestParseEveryHit(t *testing.T) {
	p := mustParse(t, everyHitPolicy)
	for _, c := range []struct {
		rule       string
		debt, cost int64
		quota      bool
	}{
		{"tokens", 1000, 1, false}, // default: one burst of debt
		{"shared", 7, 2, true},
	} {
		r := p.Rule("llm", c.rule)
		if r.Charge != EveryHit || !r.PostPaid() || r.Version.Params.MaxDebt() != c.debt || r.Cost != c.cost || r.MaxCost != 0 || r.Quota != c.quota {
			t.Errorf("%s: charge %v, max_debt %d, cost %d, max_cost %d, quota %v; want every_hit, %d, %d, 0, %v",
				c.rule, r.Charge, r.Version.Params.MaxDebt(), r.Cost, r.MaxCost, r.Quota, c.debt, c.cost, c.quota)
		}
	}
	if got := p.Summary(); !strings.Contains(got, "llm: 2 rules (2 every_hit)") {
		t.Errorf("summary %q does not count the every_hit rules", got)
	}
	bad := strings.Replace(everyHitPolicy, "      cost: 2\n", "      cost: 2\n      max_cost: 5\n", 1)
	if _, err := Parse("policy.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(),
		`policy.yaml:14: domain "llm" rule "shared": max_cost: not allowed with charge: every_hit: no cost is refused`) {
		t.Fatalf("max_cost on an every_hit rule: %v", err)
	}
}

// TestReferenceCharge: a reference file's rules charge every hit, one
// window's requests_per_unit of debt at most, unless the Compiler says
// they stop when over (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, the
// same debt) or are pre-paid; a native file of the same set is read as
// written either way.
func TestReferenceCharge(t *testing.T) {
	native := "domains:\n  edge:\n    - {name: ip, match: [{key: ip}], capacity: 5, refill: 5/s}\n"
	files := []File{{Name: "llm.yaml", Data: []byte(everyHitReference)}, {Name: "native.yaml", Data: []byte(native)}}
	for _, c := range []struct {
		given   *Charge
		charge  Charge
		debt    int64
		maxCost int64
	}{
		{nil, EveryHit, 1000, 0},
		{new(BeforeRequest), BeforeRequest, 0, 1000},
		{new(StopWhenOver), StopWhenOver, 1000, 0},
	} {
		p, err := (&Compiler{ReferenceCharge: c.given}).CompileFiles("dir", files, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := p.Rules("llm")[0]
		if r.Charge != c.charge || r.Version.Params.MaxDebt() != c.debt || r.Cost != 1 || r.MaxCost != c.maxCost {
			t.Errorf("%v: charge %v, max_debt %d, cost %d, max_cost %d; want %v, %d, 1, %d",
				c.charge, r.Charge, r.Version.Params.MaxDebt(), r.Cost, r.MaxCost, c.charge, c.debt, c.maxCost)
		}
		if n := p.Rule("edge", "ip"); n.Charge != BeforeRequest || n.MaxCost != 5 {
			t.Errorf("%v: the native rule is %v, max_cost %d", c.charge, n.Charge, n.MaxCost)
		}
	}
}

func TestExplainEveryHit(t *testing.T) {
	out := mustParse(t, everyHitPolicy).Explain("llm", entries("team", "a")).String()
	for _, w := range []string{
		`capacity 10, refill 1/s, cost 2, charge every_hit, max_debt 7, on_resize clamp, on_store_error local`,
		`every hit: each descriptor is charged its cost, refused or not, down to -max_debt`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output:\n%s\nlacks: %s", out, w)
		}
	}
}

// TestNativeYAMLEveryHit: an imported reference file says charge:
// every_hit (its max_debt, the capacity, is the default), a pre-paid one
// says nothing; a native every_hit rule keeps its cost and max_debt; each
// reads back to the same rules, and the import report says which.
func TestNativeYAMLEveryHit(t *testing.T) {
	ref := []File{{Name: "llm.yaml", Data: []byte(everyHitReference)}}
	for _, c := range []struct {
		name    string
		p       func() (*Policy, error)
		want    []string
		notWant []string
		report  string
	}{
		{"reference", func() (*Policy, error) { return ParseFiles("llm.yaml", ref) },
			[]string{"charge: every_hit"}, []string{"max_debt", "cost"}, "charge: every_hit: as there, every hit is counted"},
		{"reference, pre-paid", func() (*Policy, error) {
			return (&Compiler{ReferenceCharge: new(BeforeRequest)}).CompileFiles("llm.yaml", ref, nil, 0)
		},
			nil, []string{"charge", "max_debt"}, "when one is over the limit none is charged"},
		{"reference, stop when over", func() (*Policy, error) {
			return (&Compiler{ReferenceCharge: new(StopWhenOver)}).CompileFiles("llm.yaml", ref, nil, 0)
		},
			[]string{"charge: stop_when_over"}, []string{"max_debt", "cost"}, "only those that do not fit are counted"},
		{"native", func() (*Policy, error) { return Parse("policy.yaml", []byte(everyHitPolicy)) },
			[]string{"charge: every_hit", "max_debt: 7", "cost: 2"}, []string{"max_cost"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.p()
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.NativeYAML()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("exported:\n%s\nlacks %q", out, w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("exported:\n%s\nhas %q", out, w)
				}
			}
			back := mustParse(t, string(out))
			for _, d := range p.Domains() {
				for _, r := range p.Rules(d) {
					z := back.Rule(d, r.Name)
					if z.Charge != r.Charge || z.Version.Params != r.Version.Params || z.Cost != r.Cost || z.MaxCost != r.MaxCost {
						t.Errorf("%s: exported as %+v, was %+v", r.Name, z, r)
					}
				}
			}
			if c.report != "" && !strings.Contains(strings.Join(p.ImportReport(), "\n"), c.report) {
				t.Errorf("import report:\n%s\nlacks %q", strings.Join(p.ImportReport(), "\n"), c.report)
			}
		})
	}
}

// stopWhenOverPolicy is everyHitPolicy charged stop_when_over.
var stopWhenOverPolicy = strings.ReplaceAll(everyHitPolicy, "every_hit", "stop_when_over")

// TestParseStopWhenOver: charge: stop_when_over reads a cost and a
// max_debt, refuses max_cost and reserve, is counted by the summary and
// explained.
func TestParseStopWhenOver(t *testing.T) {
	p := mustParse(t, stopWhenOverPolicy)
	r := p.Rule("llm", "shared")
	if r.Charge != StopWhenOver || !r.PostPaid() || r.Version.Params.MaxDebt() != 7 || r.Cost != 2 || r.MaxCost != 0 {
		t.Fatalf("charge %v, max_debt %d, cost %d, max_cost %d", r.Charge, r.Version.Params.MaxDebt(), r.Cost, r.MaxCost)
	}
	if got := p.Summary(); !strings.Contains(got, "llm: 2 rules (2 stop_when_over)") {
		t.Errorf("summary %q", got)
	}
	out := p.Explain("llm", entries("team", "a")).String()
	for _, w := range []string{"capacity 10, refill 1/s, cost 2, charge stop_when_over, max_debt 7", "only the\n  descriptors that do not fit are charged"} {
		if !strings.Contains(out, w) {
			t.Errorf("explain:\n%s\nlacks: %s", out, w)
		}
	}
	for _, c := range []struct{ add, want string }{
		{"      max_cost: 5\n", `policy.yaml:14: domain "llm" rule "shared": max_cost: not allowed with charge: stop_when_over`},
		{"      reserve: 5\n", `policy.yaml:14: domain "llm" rule "shared": reserve: only with charge: after_response`},
	} {
		bad := strings.Replace(stopWhenOverPolicy, "      cost: 2\n", "      cost: 2\n"+c.add, 1)
		if _, err := Parse("policy.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.add, err, c.want)
		}
	}
	if _, err := Parse("policy.yaml", []byte(strings.Replace(stopWhenOverPolicy, "stop_when_over", "stop", 1))); err == nil ||
		!strings.Contains(err.Error(), `want before_request, after_response, every_hit or stop_when_over`) {
		t.Errorf("charge: stop: %v", err)
	}
}
