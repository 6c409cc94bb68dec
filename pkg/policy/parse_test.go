package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
)

const example = `revision: 3
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match:
        - key: user_id
      capacity: 100
      refill: 10/s
    - name: search
      match:
        - key: user_id
        - key: path
          value: /search
      capacity: 20
      refill: 1/s
      cost: 5
      max_cost: 20
      on_resize: scale
      on_store_error: local
      shadow: true
    - name: api
      match:
        - key: path
          value: /api/*
      capacity: 50
      refill: 7/3s
    - name: health-checks
      match:
        - key: path
          value: /healthz
      unlimited: true
  internal:
    - name: all
      match: [{key: service}]
      capacity: 1000
      refill: 5000/h
`

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("policy.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

func TestParseExample(t *testing.T) {
	p := mustParse(t, example)
	if p.Revision() != 3 || p.RequestIDKey() != "request_id" || len(p.SHA256()) != 64 {
		t.Fatalf("header: revision %d request_id_key %q sha256 %q", p.Revision(), p.RequestIDKey(), p.SHA256())
	}
	if got := strings.Join(p.Domains(), ","); got != "edge,internal" {
		t.Fatalf("domains: %s", got)
	}
	if n := len(p.Rules("edge")); n != 4 {
		t.Fatalf("edge has %d rules, want 4", n)
	}
	if w := p.Warnings(); len(w) != 0 {
		t.Fatalf("warnings: %v", w)
	}
	s := p.Rule("edge", "search")
	if s.Cost != 5 || s.MaxCost != 20 || !s.Shadow || s.OnResize != bucket.Scale || s.OnStoreError != StoreErrorLocal || s.Line != 10 {
		t.Fatalf("search: %+v", s)
	}
	if s.Version.Params.Capacity() != 20 || s.Version.Params.Rate().String() != "1/s" {
		t.Fatalf("search params: %+v", s.Version.Params)
	}
	u := p.Rule("edge", "per-user")
	if u.Cost != 1 || u.MaxCost != 100 || u.OnResize != bucket.Clamp || u.OnStoreError != StoreErrorLocal || u.Shadow {
		t.Fatalf("per-user defaults: %+v", u)
	}
	if api := p.Rule("edge", "api"); api.Match[0] != (Pattern{Key: "path", Value: "/api/", Kind: MatchPrefix}) ||
		api.Version.Params.Rate().Per() != 3*time.Second {
		t.Fatalf("api: %+v", api)
	}
	if h := p.Rule("edge", "health-checks"); !h.Unlimited || h.Version != nil {
		t.Fatalf("health-checks: %+v", h)
	}
}

// TestParseErrors: each bad input is refused with an error naming the file,
// the line and the rule and field, and saying what is wrong.
func TestParseErrors(t *testing.T) {
	rule := func(body string) string {
		return "domains:\n  edge:\n    - name: r\n" + body
	}
	limited := func(extra string) string {
		return rule("      match: [{key: user_id}]\n      capacity: 10\n      refill: 1/s\n" + extra)
	}
	cases := []struct{ name, src, want string }{
		{"empty file", "", `policy.yaml: empty file`},
		{"comments only", "# nothing\n", `policy.yaml: empty file`},
		{"yaml syntax", "domains: [\n", `policy.yaml:1: yaml: did not find expected node content`},
		{"two documents", "domains: {}\n---\ndomains: {}\n", `only one YAML document`},
		{"not a mapping", "- 1\n", `policy.yaml:1: policy: want a mapping, got a list`},
		{"unknown top field", "domainz: {}\n", `policy.yaml:1: policy: unknown field "domainz"`},
		{"reference format, bad domain", "domain: {}\n", `policy.yaml:1: domain: want a string, got a mapping`},
		{"missing domains", "revision: 1\n", `policy.yaml:1: domains: missing`},
		{"negative revision", "revision: -1\ndomains: {}\n", `policy.yaml:1: revision: -1 is negative`},
		{"revision not a number", "revision: three\ndomains: {}\n", `revision: want a whole number, got "three"`},
		{"domains a list", "domains: [a]\n", `domains: want a mapping`},
		{"repeated domain", "domains:\n  a: []\n  a: []\n", `policy.yaml:3: domain "a": repeated domain`},
		{"rules not a list", "domains:\n  a: {}\n", `policy.yaml:2: domain "a": want a list of rules, got a mapping`},
		{"alias", "domains:\n  a: &x []\n  b: *x\n", `policy.yaml:3: YAML aliases`},
		{"unknown rule field", limited("      burst: 3\n"), `policy.yaml:7: domain "edge" rule "r": rule: unknown field "burst" (known: name, match, `},
		{"misspelt rule field", limited("      capacityy: 3\n"), `policy.yaml:7: domain "edge" rule "r": rule: unknown field "capacityy" (did you mean capacity?)`},
		{"repeated field", limited("      capacity: 11\n"), `policy.yaml:7: domain "edge" rule "r": capacity: repeated (first at line 5)`},
		{"missing name", "domains:\n  edge:\n    - match: [{key: a}]\n      unlimited: true\n", `policy.yaml:3: domain "edge" rule #1: name: missing`},
		{"duplicate rule name", "domains:\n  edge:\n    - name: r\n      match: [{key: a}]\n      unlimited: true\n    - name: r\n      match: [{key: b}]\n      unlimited: true\n",
			`policy.yaml:6: domain "edge" rule "r": name: repeated in the domain (first at line 3)`},
		{"capacity negative", rule("      match: [{key: a}]\n      capacity: -1\n      refill: 1/s\n"), `policy.yaml:5: domain "edge" rule "r": capacity -1 out of range [1, 1000000000000000]`},
		{"capacity zero with refill", rule("      match: [{key: a}]\n      capacity: 0\n      refill: 1/s\n"), `policy.yaml:6: domain "edge" rule "r": refill: not allowed on a rule of capacity 0`},
		{"capacity zero current_limit", rule("      match: [{key: a}]\n      capacity: 0\n      current_limit: {requests_per_unit: 1, unit: second}\n"), `policy.yaml:6: domain "edge" rule "r": current_limit: requests_per_unit 1: a rule of capacity 0 allows 0`},
		{"current_limit not the rate", rule("      match: [{key: a}]\n      capacity: 5\n      refill: 5/s\n      current_limit: {requests_per_unit: 5, unit: minute}\n"), `current_limit: 5 per minute is not the refill rate 5/s`},
		{"current_limit half", rule("      match: [{key: a}]\n      capacity: 5\n      refill: 5/s\n      current_limit: {unit: minute}\n"), `current_limit: give requests_per_unit and unit together`},
		{"current_limit bad unit", rule("      match: [{key: a}]\n      capacity: 5\n      refill: 5/s\n      current_limit: {requests_per_unit: 5, unit: fortnight}\n"), `current_limit: unit "fortnight": want second`},
		{"replaces itself", rule("      match: [{key: a}]\n      unlimited: true\n      replaces: [r]\n"), `replaces: "r" is the rule's own limit name`},
		{"replaces on not_limited", rule("      match: [{key: a}]\n      not_limited: true\n      replaces: [x]\n"), `replaces: not allowed on a not_limited rule`},
		{"not_limited and unlimited", rule("      match: [{key: a}]\n      not_limited: true\n      unlimited: true\n"), `not_limited: not allowed with unlimited: true`},
		{"quota on unlimited", rule("      match: [{key: a}]\n      unlimited: true\n      quota: true\n"), `quota: not allowed on an unlimited rule`},
		{"not_limited with capacity", rule("      match: [{key: a}]\n      not_limited: true\n      capacity: 1\n"), `capacity: not allowed on a not_limited rule`},
		{"capacity too big", rule("      match: [{key: a}]\n      capacity: 1000000000000001\n      refill: 1/s\n"), `capacity 1000000000000001 out of range`},
		{"capacity beyond int64", rule("      match: [{key: a}]\n      capacity: 99999999999999999999\n      refill: 1/s\n"), `capacity: 99999999999999999999 does not fit in 64 bits`},
		{"capacity float", rule("      match: [{key: a}]\n      capacity: 1.5\n      refill: 1/s\n"), `capacity: want a whole number, got "1.5"`},
		{"missing capacity", rule("      match: [{key: a}]\n      refill: 1/s\n"), `policy.yaml:3: domain "edge" rule "r": capacity: missing`},
		{"missing refill", rule("      match: [{key: a}]\n      capacity: 1\n"), `refill: missing`},
		{"fractional refill", rule("      match: [{key: a}]\n      capacity: 1\n      refill: 0.5/s\n"), `policy.yaml:6: domain "edge" rule "r": refill: rate "0.5/s": tokens "0.5" is not a whole number; write 1/2s`},
		{"bad refill unit", rule("      match: [{key: a}]\n      capacity: 1\n      refill: 10/q\n"), `policy.yaml:6: domain "edge" rule "r": refill: rate "10/q": period must be`},
		{"zero refill", rule("      match: [{key: a}]\n      capacity: 1\n      refill: 0/s\n"), `refill: rate "0/s": rate tokens 0 out of range`},
		{"refill beyond range", rule("      match: [{key: a}]\n      capacity: 1\n      refill: 1/367d\n"), `refill: rate "1/367d"`},
		{"cost above capacity", limited("      cost: 11\n"), `policy.yaml:7: domain "edge" rule "r": cost: 11 exceeds capacity 10`},
		{"negative cost", limited("      cost: -1\n"), `cost: -1 is negative`},
		{"max_cost above capacity", limited("      max_cost: 11\n"), `max_cost: 11 exceeds capacity 10`},
		{"max_cost zero", limited("      max_cost: 0\n"), `max_cost: 0 is below 1`},
		{"cost above max_cost", limited("      cost: 5\n      max_cost: 4\n"), `policy.yaml:7: domain "edge" rule "r": cost: 5 exceeds max_cost 4`},
		{"on_resize", limited("      on_resize: grow\n"), `policy.yaml:7: domain "edge" rule "r": on_resize "grow": want clamp or scale`},
		{"on_store_error", limited("      on_store_error: panic\n"), `on_store_error: "panic": want deny, allow or local`},
		{"shadow not bool", limited("      shadow: maybe\n"), `shadow: want true or false, got "maybe"`},
		{"empty match", rule("      match: []\n      unlimited: true\n"), `policy.yaml:4: domain "edge" rule "r": match: empty`},
		{"match not a list", rule("      match: {key: a}\n      unlimited: true\n"), `match: want a list`},
		{"missing match", rule("      unlimited: true\n"), `match: missing`},
		{"empty key", rule("      match: [{key: \"\"}]\n      unlimited: true\n"), `match: entry 1: key: empty`},
		{"missing key", rule("      match: [{value: a}]\n      unlimited: true\n"), `match: entry 1: key: missing`},
		{"unknown entry field", rule("      match: [{key: a, prefix: b}]\n      unlimited: true\n"), `match entry 1: unknown field "prefix"`},
		{"literal without value", rule("      match: [{key: a, literal: true}]\n      unlimited: true\n"), `match: entry 1 (key "a"): literal: needs a value`},
		{"shared exact", rule("      match: [{key: a, value: \"/a\", shared: true}]\n      unlimited: true\n"), `match: entry 1 (key "a"): shared: only a value with a "*"`},
		{"empty value", rule("      match: [{key: a, value: \"\"}]\n      unlimited: true\n"), `empty value; omit "value"`},
		{"null value", rule("      match: [{key: a, value: }]\n      unlimited: true\n"), `empty value`},
		{"unlimited with capacity", rule("      match: [{key: a}]\n      unlimited: true\n      capacity: 5\n"), `policy.yaml:6: domain "edge" rule "r": capacity: not allowed on an unlimited rule`},
		{"unlimited with refill", rule("      match: [{key: a}]\n      unlimited: true\n      refill: 1/s\n"), `refill: not allowed on an unlimited rule`},
		{"too large", "# " + strings.Repeat("x", MaxFileSize) + "\n", `policy.yaml: file is 4194307 bytes, more than the 4194304 allowed`},
		{"non-printable name", "domains:\n  edge:\n    - name: \"a\\tb\"\n      match: [{key: a}]\n      unlimited: true\n", `name: "a\tb" has characters that are not printable`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("policy.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if p != nil {
				t.Fatal("a bad file returned a policy")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T is not Errors", err)
			}
		})
	}
}

// TestParseReportsEveryError: all problems of a file come out at once,
// in line order, and wrap pkg/bucket's errors.
func TestParseReportsEveryError(t *testing.T) {
	src := `domains:
  edge:
    - name: a
      match: [{key: k}]
      capacity: -1
      refill: 1/s
    - name: b
      match: [{key: k}]
      capacity: 5
      refill: 10/q
    - name: a
      match: []
      unlimited: true
    - name: d
      match: [{key: k2}]
      capacity: -1
      refill: 1/x
  other:
    - name: c
      match: [{key: k}]
      capacity: 5
      refill: 1/s
      cost: 6
`
	_, err := Parse("p.yaml", []byte(src))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		`p.yaml:5: domain "edge" rule "a": capacity -1 out of range`,
		`p.yaml:10: domain "edge" rule "b": refill: rate "10/q"`,
		`p.yaml:11: domain "edge" rule "a": name: repeated in the domain (first at line 3)`,
		`p.yaml:12: domain "edge" rule "a": match: empty`,
		`p.yaml:16: domain "edge" rule "d": capacity -1 out of range`,
		`p.yaml:17: domain "edge" rule "d": refill: rate "1/x"`,
		`p.yaml:23: domain "other" rule "c": cost: 6 exceeds capacity 5`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d: %q, want prefix %q", i, errs[i], w)
		}
	}
	if errs[1].Line != 10 || errs[1].Domain != "edge" || errs[1].Rule != "b" || errs[1].Field != "refill" {
		t.Errorf("issue fields: %+v", errs[1])
	}
	if errors.Unwrap(errs[1].Err) == nil {
		t.Errorf("the refill error does not wrap pkg/bucket's: %v", errs[1].Err)
	}
}

// TestParseRepeatedNames: a repeated rule name is reported whatever else
// is wrong with either rule, and a repeated domain's rules are checked too.
func TestParseRepeatedNames(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"the repeat has another error", `domains:
  edge:
    - {name: r, match: [{key: a}], unlimited: true}
    - {name: r, match: [{key: b}], capacity: -1, refill: 1/s}
`, []string{
			`p.yaml:4: domain "edge" rule "r": name: repeated in the domain (first at line 3)`,
			`p.yaml:4: domain "edge" rule "r": capacity -1 out of range`,
		}},
		{"the first has an error", `domains:
  edge:
    - {name: r, match: [], unlimited: true}
    - {name: r, match: [{key: b}], unlimited: true}
`, []string{
			`p.yaml:3: domain "edge" rule "r": match: empty`,
			`p.yaml:4: domain "edge" rule "r": name: repeated in the domain (first at line 3)`,
		}},
		{"three times, all bad", `domains:
  edge:
    - {name: r, match: [{key: a}], refill: 1/s}
    - {name: r, match: [{key: a}], capacity: 1}
    - {name: r, match: [{key: a}], unlimited: yes please}
`, []string{
			`p.yaml:3: domain "edge" rule "r": capacity: missing`,
			`p.yaml:4: domain "edge" rule "r": name: repeated in the domain (first at line 3)`,
			`p.yaml:4: domain "edge" rule "r": refill: missing`,
			`p.yaml:5: domain "edge" rule "r": name: repeated in the domain (first at line 3)`,
			`p.yaml:5: domain "edge" rule "r": unlimited: want true or false`,
		}},
		{"a repeated domain's bad rules", `domains:
  edge: []
  edge:
    - {name: r, match: [{key: a}], capacity: 1, refill: 1/q}
`, []string{
			`p.yaml:3: domain "edge": repeated domain`,
			`p.yaml:4: domain "edge" rule "r": refill: rate "1/q"`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(c.src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v", err)
			}
			if len(errs) != len(c.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(c.want), err)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("error %d: %q, want prefix %q", i, errs[i], w)
				}
			}
		})
	}
}

// TestParseWarnsEmpty: a policy with no domains, or a domain with no
// rules, is valid but limits nothing there, and says so.
func TestParseWarnsEmpty(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"no domains", "domains: {}\n", `policy.yaml:1: domains: empty: the policy limits nothing (every request is answered OK)`},
		{"no domains, block style", "revision: 2\ndomains:\n  {}\n", `policy.yaml:3: domains: empty`},
		{"a domain without rules", "domains:\n  edge: []\n", `policy.yaml:2: domain "edge": no rules: every request to this domain is answered OK`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := mustParse(t, c.src).Warnings()
			if len(w) != 1 || !strings.HasPrefix(w[0].Error(), c.want) {
				t.Fatalf("warnings %v, want one starting %q", w, c.want)
			}
		})
	}
}

func TestParseWarnings(t *testing.T) {
	p := mustParse(t, `request_id_key: rid
domains:
  edge:
    - name: any-path
      match: [{key: path}]
      capacity: 5
      refill: 1/s
    - name: search
      match: [{key: path, value: /search}]
      capacity: 5
      refill: 1/s
    - name: api
      match: [{key: user}, {key: path, value: /api/*}]
      capacity: 5
      refill: 1/s
    - name: api-v1
      match: [{key: user}, {key: path, value: /api/v1*}]
      capacity: 5
      refill: 1/s
    - name: api-other
      match: [{key: user}, {key: path, value: /other}]
      capacity: 5
      refill: 1/s
    - name: id
      match: [{key: rid}]
      unlimited: true
`)
	var got []string
	for _, w := range p.Warnings() {
		got = append(got, w.Error())
	}
	want := []string{
		`policy.yaml:8: domain "edge" rule "search": never matches: rule "any-path" (line 4) comes first and matches everything it would`,
		`policy.yaml:16: domain "edge" rule "api-v1": never matches: rule "api" (line 12)`,
		`policy.yaml:24: domain "edge" rule "id": match: key "rid" is the request_id_key`,
	}
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d: %q, want prefix %q", i, got[i], want[i])
		}
	}
}
