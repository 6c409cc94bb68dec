package policy

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

const reservePolicy = `request_id_key: request_id
domains:
  llm:
    - name: tokens
      match: [{key: user_id}]
      capacity: 20000
      refill: 20000/m
      charge: after_response
      reserve: 400
    - name: per-model
      match: [{key: model}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
      reserve: 1000
      reserve_ttl: 90s
    - name: plain
      match: [{key: team}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
`

func TestParseReserve(t *testing.T) {
	p := mustParse(t, reservePolicy)
	for _, c := range []struct {
		rule string
		n    int64
		ttl  time.Duration
	}{
		{"tokens", 400, DefaultReserveTTL},
		{"per-model", 1000, 90 * time.Second}, // the whole capacity
		{"plain", 0, 0},
	} {
		r := p.Rule("llm", c.rule)
		if r.Reserve != c.n || r.ReserveTTL != c.ttl || r.Reserves() != (c.n > 0) {
			t.Errorf("%s: reserve %d for %s, want %d for %s", c.rule, r.Reserve, r.ReserveTTL, c.n, c.ttl)
		}
	}
}

// TestParseReserveErrors: each bad input is refused with the file, the
// line, the rule and the field.
func TestParseReserveErrors(t *testing.T) {
	rule := func(extra string) string {
		return "request_id_key: rid\ndomains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n      capacity: 10\n      refill: 1/s\n" + extra
	}
	post := "      charge: after_response\n"
	for _, c := range []struct{ name, src, want string }{
		{"no request_id_key", strings.TrimPrefix(rule(post+"      reserve: 5\n"), "request_id_key: rid\n"),
			`policy.yaml:8: domain "edge" rule "r": reserve: needs the policy's request_id_key (the report that settles a reservation is found by its request id)`},
		{"no request_id_key, other errors", "domains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n      capacity: -1\n      refill: 1/s\n" + post + "      reserve: 5\n",
			`policy.yaml:8: domain "edge" rule "r": reserve: needs the policy's request_id_key`},
		{"pre-paid", rule("      reserve: 5\n"), `policy.yaml:8: domain "edge" rule "r": reserve: only with charge: after_response`},
		{"every hit", rule("      charge: every_hit\n      reserve: 5\n"), `policy.yaml:9: domain "edge" rule "r": reserve: only with charge: after_response (a rule of charge: every_hit has no checks`},
		{"shadow", rule(post + "      shadow: true\n      reserve: 5\n"), `policy.yaml:10: domain "edge" rule "r": reserve: not allowed with shadow: true`},
		{"zero", rule(post + "      reserve: 0\n"), `policy.yaml:9: domain "edge" rule "r": reserve: 0 is below 1`},
		{"above capacity", rule(post + "      reserve: 11\n"), `policy.yaml:9: domain "edge" rule "r": reserve: 11 exceeds capacity 10`},
		{"not a number", rule(post + "      reserve: some\n"), `reserve: want a whole number, got "some"`},
		// Held on every limit, so the smallest must hold it.
		{"above a limit's capacity", "request_id_key: rid\ndomains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n" + post +
			"      limits:\n        - {capacity: 100, refill: 100/m}\n        - {budget: 20, per: day}\n      reserve: 30\n",
			`policy.yaml:10: domain "edge" rule "r": reserve: 30 exceeds capacity 20`},
		{"ttl without reserve", rule(post + "      reserve_ttl: 1m\n"), `policy.yaml:9: domain "edge" rule "r": reserve_ttl: only with reserve`},
		{"ttl not a duration", rule(post + "      reserve: 5\n      reserve_ttl: soon\n"), `policy.yaml:10: domain "edge" rule "r": reserve_ttl: time: invalid duration "soon"`},
		{"ttl zero", rule(post + "      reserve: 5\n      reserve_ttl: 0s\n"), `reserve_ttl: 0s is out of range (0, 24h0m0s]`},
		{"ttl too long", rule(post + "      reserve: 5\n      reserve_ttl: 25h\n"), `reserve_ttl: 25h0m0s is out of range`},
		{"unlimited", "request_id_key: rid\ndomains:\n  edge:\n    - name: r\n      match: [{key: a}]\n      unlimited: true\n      reserve: 1\n", `reserve: not allowed on an unlimited rule`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

func TestExplainReserve(t *testing.T) {
	p := mustParse(t, reservePolicy)
	out := p.Explain("llm", entries("model", "m1")).String()
	want := "  reserve 1000, reserve_ttl 1m30s: a check with the request id holds 1000 tokens"
	if !strings.Contains(out, want) || !strings.Contains(out, "a check without a request id holds nothing") {
		t.Errorf("output:\n%s\nlacks: %s", out, want)
	}
	if out := p.Explain("llm", entries("team", "t")).String(); strings.Contains(out, "reserve") {
		t.Errorf("a rule without reserve explained as reserving:\n%s", out)
	}
}

// TestNativeYAMLReserve: the exporter writes reserve, and reserve_ttl when
// it is not the default, and reads back to the same rules.
func TestNativeYAMLReserve(t *testing.T) {
	p := mustParse(t, reservePolicy)
	out, err := p.NativeYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), "reserve:") != 2 || strings.Count(string(out), "reserve_ttl: 1m30s") != 1 {
		t.Fatalf("exported:\n%s", out)
	}
	back := mustParse(t, string(out))
	for _, r := range p.Rules("llm") {
		if z := back.Rule("llm", r.Name); z.Reserve != r.Reserve || z.ReserveTTL != r.ReserveTTL {
			t.Errorf("%s: exported as reserve %d for %s, was %d for %s", r.Name, z.Reserve, z.ReserveTTL, r.Reserve, r.ReserveTTL)
		}
	}
}

// TestReserveTTLPattern: the schema's pattern matches every reserve_ttl
// time.ParseDuration reads as positive.
func TestReserveTTLPattern(t *testing.T) {
	re := regexp.MustCompile(reserveTTLPattern)
	for _, s := range []string{"10m", "30s", "1h30m", "1.5h", ".5s", "1.s", "+1s", "500ms", "2h45m10s", "10us", "10µs", "1ns", "0s", "-1s", "1", "m", "1d", "1 m", "", "1e3s"} {
		d, err := time.ParseDuration(s)
		if err == nil && d > 0 && !re.MatchString(s) {
			t.Errorf("%q: the parser accepts it, the pattern refuses it", s)
		}
		if err != nil && re.MatchString(s) {
			t.Errorf("%q: the pattern accepts what the parser refuses (%v)", s, err)
		}
	}
}

// TestSchemaReserve: the schema takes a reserve rule and refuses a
// reserve_ttl that is no duration.
func TestSchemaReserve(t *testing.T) {
	schema := loadSchema(t)
	if errs := schemaCheck(t, schema, yamlValue(t, []byte(reservePolicy))); errs != nil {
		t.Fatalf("the schema refuses a valid reserve policy:\n%s", strings.Join(errs, "\n"))
	}
	bad := strings.Replace(reservePolicy, "reserve_ttl: 90s", "reserve_ttl: soon", 1)
	if errs := schemaCheck(t, schema, yamlValue(t, []byte(bad))); len(errs) != 1 || !strings.Contains(errs[0], "/domains/llm/1/reserve_ttl") {
		t.Fatalf("reserve_ttl: soon: %v", errs)
	}
}
