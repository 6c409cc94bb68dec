package policy

import (
	"fmt"
	"strings"
	"testing"
)

// benchPolicy is one domain of 200 rules; rule(i) writes the match list of
// rule i.
func benchPolicy(b *testing.B, rule func(i int) string) *Policy {
	var sb strings.Builder
	sb.WriteString("domains:\n  edge:\n")
	for i := range 200 {
		fmt.Fprintf(&sb, "    - name: r%d\n      match: %s\n      capacity: 10\n      refill: 1/s\n", i, rule(i))
	}
	return mustParse(b, sb.String())
}

// BenchmarkMatch matches a 3-entry descriptor against a 200-rule domain:
//
//   - spread: 40 key sequences of 5 rules each, the descriptor matching the
//     last rule of the last sequence;
//   - exact: 200 rules with the same keys and exact paths, matching the
//     last one;
//   - prefix: 200 rules with the same keys and path prefixes, matching the
//     last one: the worst case, a scan of every prefix rule.
func BenchmarkMatch(b *testing.B) {
	cases := []struct {
		name string
		rule func(i int) string
		desc []Entry
	}{
		{"spread", func(i int) string {
			return fmt.Sprintf("[{key: k%d}, {key: user_id}, {key: path, value: /p%d}]", i/5, i%5)
		}, entries("k39", "t", "user_id", "alice", "path", "/p4")},
		{"exact", func(i int) string {
			return fmt.Sprintf("[{key: tenant}, {key: user_id}, {key: path, value: /p%d}]", i)
		}, entries("tenant", "t", "user_id", "alice", "path", "/p199")},
		{"prefix", func(i int) string {
			return fmt.Sprintf("[{key: tenant}, {key: user_id}, {key: path, value: /p%d/*}]", i)
		}, entries("tenant", "t", "user_id", "alice", "path", "/p199/x")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := benchPolicy(b, c.rule)
			want := p.Rule("edge", "r199")
			b.ReportAllocs()
			for b.Loop() {
				if r := p.Match("edge", c.desc); r != want {
					b.Fatalf("matched %v", r)
				}
			}
		})
	}
}

// BenchmarkAppendKey builds the bucket key of a 3-entry descriptor into a
// reused buffer.
func BenchmarkAppendKey(b *testing.B) {
	r := mustParse(b, example).Rule("edge", "search")
	desc := entries("user_id", "0f8fad5b-d9cb-469f-a165-70867728950e", "path", "/search")
	key := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		key = r.AppendKey(key[:0], desc)
	}
}
