package policy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func entries(kv ...string) []Entry {
	es := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// matches is the definition of a match, without the index: the descriptor
// has exactly r's entries, in order, and r's patterns accept the values.
func (r *Rule) matches(entries []Entry) bool {
	if len(entries) != len(r.Match) {
		return false
	}
	for i, m := range r.Match {
		if entries[i].Key != m.Key || !m.Matches(entries[i].Value) {
			return false
		}
	}
	return true
}

func TestMatch(t *testing.T) {
	p := mustParse(t, example+`    - name: api-exact
      match: [{key: path, value: /api/x}]
      capacity: 1
      refill: 1/s
`)
	cases := []struct {
		domain string
		desc   []Entry
		want   string // rule name, "" for none
	}{
		{"edge", entries("user_id", "alice"), "per-user"},
		{"edge", entries("user_id", ""), "per-user"},
		{"edge", entries("user_id", "alice", "path", "/search"), "search"},
		{"edge", entries("user_id", "alice", "path", "/search/x"), ""},
		{"edge", entries("path", "/search", "user_id", "alice"), ""},
		{"edge", entries("user_id", "alice", "path", "/search", "x", "y"), ""},
		{"edge", entries("path", "/api/"), "api"},
		{"edge", entries("path", "/api/x"), "api"}, // the prefix rule comes first
		{"edge", entries("path", "/api"), ""},
		{"edge", entries("path", "/healthz"), "health-checks"},
		{"internal", entries("service", "db"), "all"},
		{"internal", entries("user_id", "alice"), ""},
		{"nope", entries("user_id", "alice"), ""},
		{"edge", nil, ""},
	}
	for _, c := range cases {
		got := ""
		if r := p.Match(c.domain, c.desc); r != nil {
			got = r.Name
		}
		if got != c.want {
			t.Errorf("%s %v: got rule %q, want %q", c.domain, c.desc, got, c.want)
		}
	}
}

// TestMatchFirstInFileOrder: the index never changes which rule wins
// against a plain scan in file order, whatever mix of exact, prefix and
// wildcard patterns and key sequences the domain has.
func TestMatchFirstInFileOrder(t *testing.T) {
	keys := []string{"a", "b", "c"}
	values := []string{"x", "xy", "xyz", "y"}
	drawPattern := func(t *rapid.T) Pattern {
		p := Pattern{Key: rapid.SampledFrom(keys).Draw(t, "key"), Kind: MatchKind(rapid.IntRange(0, 2).Draw(t, "kind"))}
		if p.Kind != MatchAny {
			p.Value = rapid.SampledFrom(values).Draw(t, "value")
		}
		return p
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 30).Draw(t, "rules")
		rules := make([]*Rule, n)
		for i := range rules {
			rules[i] = &Rule{Name: fmt.Sprint(i), Match: rapid.SliceOfN(rapid.Custom(drawPattern), 1, 3).Draw(t, "match")}
		}
		d := newDomain(rules)
		for range 20 {
			desc := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Entry {
				return Entry{Key: rapid.SampledFrom(keys).Draw(t, "key"), Value: rapid.SampledFrom(values).Draw(t, "value")}
			}), 1, 3).Draw(t, "descriptor")
			var want *Rule
			for _, r := range rules {
				if r.matches(desc) {
					want = r
					break
				}
			}
			if got := d.match(desc); got != want {
				t.Fatalf("descriptor %v: got %v, want %v", desc, got, want)
			}
		}
	})
}

func TestAppendKeyUnambiguous(t *testing.T) {
	key := func(domain, name string, desc []Entry) string {
		r := &Rule{Domain: domain, Name: name, prefix: keyPrefix(domain, name)}
		return string(r.AppendKey(nil, desc))
	}
	pairs := [][2]string{
		{key("edge", "r", entries("k", "a|b", "k", "c")), key("edge", "r", entries("k", "a", "k", "b|c"))},
		{key("edge", "r", entries("k", "ab", "k", "c")), key("edge", "r", entries("k", "a", "k", "bc"))},
		{key("ab", "c", entries("k", "v")), key("a", "bc", entries("k", "v"))},
		{key("edge", "r", entries("k", "")), key("edge", "r", entries("k", "", "k", ""))},
		{key("edge", "r", entries("k", "\x01x")), key("edge", "r", entries("k", "", "k", "x"))},
	}
	for _, p := range pairs {
		if p[0] == p[1] {
			t.Errorf("collision: %q", p[0])
		}
	}
	// Property: distinct (domain, rule, values) give distinct keys.
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.StringMatching(`[ab|\x00-\x03]{0,4}`)
		d1, n1, v1 := str.Draw(t, "d1"), str.Draw(t, "n1"), rapid.SliceOfN(str, 0, 3).Draw(t, "v1")
		d2, n2, v2 := str.Draw(t, "d2"), str.Draw(t, "n2"), rapid.SliceOfN(str, 0, 3).Draw(t, "v2")
		asEntries := func(vs []string) []Entry {
			es := make([]Entry, len(vs))
			for i, v := range vs {
				es[i].Value = v
			}
			return es
		}
		same := d1 == d2 && n1 == n2 && strings.Join(v1, "\xff") == strings.Join(v2, "\xff") && len(v1) == len(v2)
		if k1, k2 := key(d1, n1, asEntries(v1)), key(d2, n2, asEntries(v2)); (k1 == k2) != same {
			t.Fatalf("(%q %q %q) and (%q %q %q): keys %q and %q", d1, n1, v1, d2, n2, v2, k1, k2)
		}
	})
}

func TestKeyString(t *testing.T) {
	r := mustParse(t, example).Rule("edge", "search")
	desc := entries("user_id", "alice", "path", "/search")
	if got := r.KeyString(desc); got != `edge/search["alice" "/search"]` {
		t.Fatalf("KeyString: %s", got)
	}
	if got := r.AppendKey([]byte("x"), desc); !bytes.Equal(got, []byte("x\x04edge\x06search\x05alice\x07/search")) {
		t.Fatalf("AppendKey: %q", got)
	}
}

func TestMatchAndAppendKeyDoNotAllocate(t *testing.T) {
	p := mustParse(t, example)
	desc := entries("user_id", "alice", "path", "/search")
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		r := p.Match("edge", desc)
		buf = r.AppendKey(buf[:0], desc)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per match", allocs)
	}
}
