package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestSummaryAndValidate(t *testing.T) {
	sum := sha256.Sum256([]byte(example))
	want := "policy.yaml: OK: revision 3, 2 domains (edge: 4 rules, internal: 1 rule), sha256 " + hex.EncodeToString(sum[:]) + "\n"
	var out bytes.Buffer
	if err := Validate(&out, "policy.yaml", []byte(example)); err != nil || out.String() != want {
		t.Fatalf("Validate: %v\n%q\nwant\n%q", err, out.String(), want)
	}

	out.Reset()
	unreachable := example + "    - name: late\n      match: [{key: service, value: db}]\n      unlimited: true\n"
	if err := Validate(&out, "policy.yaml", []byte(unreachable)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `warning: policy.yaml:38: domain "internal" rule "late": never matches`) {
		t.Fatalf("warnings:\n%s", out.String())
	}

	out.Reset()
	err := Validate(&out, "policy.yaml", []byte("domains: {edge: [{name: x}]}\n"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 || out.Len() != 0 {
		t.Fatalf("bad file: %v, output %q", err, out.String())
	}
}

// TestValidateWarnsEmptyDomains: `tokengate validate` accepts a policy
// that limits nothing, and prints why after its summary.
func TestValidateWarnsEmptyDomains(t *testing.T) {
	var out bytes.Buffer
	if err := Validate(&out, "policy.yaml", []byte("domains: {}\n")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "policy.yaml: OK: revision 0, 0 domains") ||
		lines[1] != "warning: policy.yaml:1: domains: empty: the policy limits nothing (every request is answered OK)" {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestParseEntries(t *testing.T) {
	got, err := ParseEntries([]string{"user_id=alice", "path=/a=b", "empty="})
	if err != nil || len(got) != 3 || got[1] != (Entry{"path", "/a=b"}) || got[2] != (Entry{"empty", ""}) {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range [][]string{nil, {"novalue"}, {"=v"}} {
		if _, err := ParseEntries(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestExplain(t *testing.T) {
	p := mustParse(t, example)
	cases := []struct {
		name, domain string
		desc         []Entry
		want         []string // substrings of the output, in order
	}{
		{"limited", "edge", entries("user_id", "alice", "path", "/search"), []string{
			`domain "edge" descriptor (user_id=alice, path=/search)`,
			`matches rule "search" (policy.yaml:10)`,
			`capacity 20, refill 1/s, cost 5, max_cost 20, on_resize scale, on_store_error local`,
			`shadow: decides and counts, always answers OK`,
			`bucket key: edge/search["alice" "/search"]`,
			`bucket key bytes: "\x04edge\x06search\x05alice\a/search"`,
		}},
		{"unlimited", "edge", entries("path", "/healthz"), []string{
			`matches rule "health-checks"`, `unlimited: always OK, no bucket`,
		}},
		{"value mismatch", "edge", entries("user_id", "alice", "path", "/other"), []string{
			`matches no rule: the request is not limited`,
			`rule "search" (line 10): path: value "/other" does not match path=/search`,
		}},
		{"prefix mismatch", "edge", entries("path", "/x"), []string{
			`rule "api" (line 22): path: value "/x" does not match path=/api/*`,
			`rule "health-checks" (line 28): path: value "/x" does not match path=/healthz`,
		}},
		{"no such keys", "edge", entries("tenant", "t"), []string{
			`no rule has exactly the keys (tenant), in that order; the domain's rules have (user_id) or (user_id, path) or (path)`,
		}},
		{"no such domain", "nope", entries("user_id", "a"), []string{
			`the policy has no domain "nope" (domains: edge, internal)`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := p.Explain(c.domain, c.desc).String()
			rest := out
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output:\n%s\nlacks (in order): %s", out, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
	e := p.Explain("edge", entries("user_id", "bob"))
	if e.Rule.Name != "per-user" || string(e.Key) != string(e.Rule.AppendKey(nil, e.Entries)) || len(e.Why) != 0 {
		t.Fatalf("explanation %+v", e)
	}
}
