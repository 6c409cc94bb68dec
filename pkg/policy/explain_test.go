package policy

import (
	"os"
	"strings"
	"testing"
)

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
			`bucket key hash: needs the deployment's secret (--key-hash-secret-file)`,
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
	e.KeyHash = "0123456789ab"
	if out := e.String(); !strings.Contains(out, "\n  bucket key hash: 0123456789ab (key in dynamic metadata") {
		t.Fatalf("with its hash:\n%s", out)
	}
}

// TestExplainInDocs: the explain example of docs/policy.md is what
// Explain prints for the policy docs/policy.md shows first, line for line.
func TestExplainInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, yamlBlock, _ := strings.Cut(string(doc), "```yaml\n")
	yamlBlock, _, _ = strings.Cut(yamlBlock, "```\n")
	_, console, _ := strings.Cut(string(doc), "$ tokengate explain --policy policy.yaml --domain edge ")
	console, _, _ = strings.Cut(console, "```\n")
	args, want, _ := strings.Cut(console, "\n")
	var desc []Entry
	for _, kv := range strings.Fields(args) {
		k, v, _ := strings.Cut(kv, "=")
		desc = append(desc, Entry{Key: k, Value: v})
	}
	p := mustParse(t, yamlBlock)
	if got := p.Explain("edge", desc).String(); got != want {
		t.Errorf("docs/policy.md shows\n%s\nExplain prints\n%s", want, got)
	}
}
