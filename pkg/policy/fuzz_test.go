package policy

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: no input makes Parse panic; a refused file reports located
// issues; an accepted one is self-consistent (every rule is found by a
// descriptor built from its own patterns, or by an earlier rule).
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add(onePolicy(100, "7/3s", "scale"))
	f.Add([]byte("domains:\n  a:\n    - name: r\n      match: [{key: k, value: \"v*\"}]\n      unlimited: true\n"))
	f.Add([]byte("domains: {a: &x [], b: *x}\n"))
	f.Add([]byte("revision: 99999999999999999999\ndomains: {}\n"))
	f.Add([]byte("domains:\n  a:\n    - {name: r, match: [{key: k}], capacity: 1000000000000000, refill: 1000000000000/ns, cost: 0}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v is not Errors", err, err)
			}
			for _, is := range errs {
				if !strings.HasPrefix(is.Error(), "f.yaml") {
					t.Fatalf("issue %q does not name the file", is)
				}
			}
			return
		}
		_ = p.Summary()
		for _, name := range p.Domains() {
			rules := p.Rules(name)
			for i, r := range rules {
				if !r.Unlimited && (r.Version == nil || r.Cost > r.MaxCost || r.MaxCost > r.Version.Params.Capacity()) {
					t.Fatalf("rule %+v", r)
				}
				desc := make([]Entry, len(r.Match))
				for j, m := range r.Match {
					desc[j] = Entry{Key: m.Key, Value: m.Value}
					if m.Kind != MatchExact {
						desc[j].Value += "x"
					}
				}
				got := p.Match(name, desc)
				if got == nil || got.Line > r.Line || (got != r && !shadowsSome(rules[:i], got)) {
					t.Fatalf("rule %q: its own descriptor %v matched %v", r.Name, desc, got)
				}
				_ = p.Explain(name, desc).String()
			}
		}
	})
}

func shadowsSome(rules []*Rule, r *Rule) bool {
	for _, x := range rules {
		if x == r {
			return true
		}
	}
	return false
}
