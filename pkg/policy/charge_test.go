package policy

import (
	"strings"
	"testing"
)

const postPaidPolicy = `domains:
  llm:
    - name: tokens
      match: [{key: user_id}]
      capacity: 20000
      refill: 20000/m
      charge: after_response
      max_debt: 100000
    - name: per-model
      match: [{key: model}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
    - name: requests
      match: [{key: ip}]
      capacity: 10
      refill: 1/s
      charge: before_request
`

func TestParsePostPaid(t *testing.T) {
	p := mustParse(t, postPaidPolicy)
	for _, c := range []struct {
		rule       string
		charge     Charge
		debt, cost int64
	}{
		{"tokens", AfterResponse, 100_000, 0},
		{"per-model", AfterResponse, 1000, 0}, // default: one burst of debt
		{"requests", BeforeRequest, 0, 1},
	} {
		r := p.Rule("llm", c.rule)
		if r.Charge != c.charge || r.PostPaid() != (c.charge == AfterResponse) || r.Version.Params.MaxDebt() != c.debt || r.Cost != c.cost {
			t.Errorf("%s: charge %v, max_debt %d, cost %d; want %v, %d, %d", c.rule, r.Charge, r.Version.Params.MaxDebt(), r.Cost, c.charge, c.debt, c.cost)
		}
	}
	if got := p.Summary(); !strings.Contains(got, "llm: 3 rules (2 post-paid)") {
		t.Errorf("summary %q does not count the post-paid rules", got)
	}
}

// TestParsePostPaidErrors: each bad input is refused with the file, the
// line, the rule and the field.
func TestParsePostPaidErrors(t *testing.T) {
	rule := func(extra string) string {
		return "domains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n      capacity: 10\n      refill: 1/s\n" + extra
	}
	for _, c := range []struct{ name, src, want string }{
		{"bad charge", rule("      charge: later\n"), `policy.yaml:7: domain "edge" rule "r": charge: "later": want before_request, after_response, every_hit or stop_when_over`},
		{"max_debt without charge", rule("      max_debt: 5\n"), `policy.yaml:7: domain "edge" rule "r": max_debt: only with charge: after_response`},
		{"max_debt negative", rule("      charge: after_response\n      max_debt: -1\n"), `policy.yaml:8: domain "edge" rule "r": max_debt -1 out of range [0, 1000000000000000]`},
		{"max_debt too large", rule("      charge: after_response\n      max_debt: 1000000000000001\n"), `max_debt 1000000000000001 out of range`},
		{"max_debt not a number", rule("      charge: after_response\n      max_debt: lots\n"), `max_debt: want a whole number, got "lots"`},
		{"cost", rule("      charge: after_response\n      cost: 5\n"), `policy.yaml:8: domain "edge" rule "r": cost: not allowed with charge: after_response: a check charges nothing`},
		{"max_cost", rule("      charge: after_response\n      max_cost: 5\n"), `max_cost: not allowed with charge: after_response`},
		{"quota", rule("      charge: after_response\n      quota: true\n"), `quota: not allowed with charge: after_response`},
		{"unlimited", "domains:\n  edge:\n    - name: r\n      match: [{key: a}]\n      unlimited: true\n      charge: after_response\n", `charge: not allowed on an unlimited rule`},
		{"capacity 0", "domains:\n  edge:\n    - name: r\n      match: [{key: a}]\n      capacity: 0\n      charge: after_response\n", `charge: not allowed on a rule of capacity 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

func TestExplainPostPaid(t *testing.T) {
	out := mustParse(t, postPaidPolicy).Explain("llm", entries("user_id", "alice")).String()
	for _, w := range []string{
		`capacity 20000, refill 20000/m, charge after_response, max_debt 100000, on_resize clamp, on_store_error local`,
		`post-paid: a descriptor with its own hits_addend above 0 reports usage`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output:\n%s\nlacks: %s", out, w)
		}
	}
}

// TestNativeYAMLPostPaid: the exporter writes charge and max_debt (the
// latter only when it is not the default), and what it writes reads back
// to the same rules.
func TestNativeYAMLPostPaid(t *testing.T) {
	p := mustParse(t, postPaidPolicy)
	out, err := p.NativeYAML()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "charge: after_response"); n != 2 || strings.Count(string(out), "max_debt:") != 1 || strings.Contains(string(out), "cost") {
		t.Fatalf("exported:\n%s", out)
	}
	back := mustParse(t, string(out))
	for _, r := range p.Rules("llm") {
		z := back.Rule("llm", r.Name)
		if z.Charge != r.Charge || z.Version.Params != r.Version.Params || z.Cost != r.Cost || z.MaxCost != r.MaxCost {
			t.Errorf("%s: exported as %+v, was %+v", r.Name, z, r)
		}
	}
}

// TestMaxDebtVersions: a change of max_debt is a new version of its rule
// alone.
func TestMaxDebtVersions(t *testing.T) {
	var cc Compiler
	q1, err := cc.Compile("policy.yaml", []byte(postPaidPolicy), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := cc.Compile("policy.yaml", []byte(strings.ReplaceAll(postPaidPolicy, "100000", "5")), q1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q2.Rule("llm", "tokens").Version == q1.Rule("llm", "tokens").Version || q2.Rule("llm", "per-model").Version != q1.Rule("llm", "per-model").Version {
		t.Fatal("a change of max_debt is not a new version of its rule alone")
	}
}
