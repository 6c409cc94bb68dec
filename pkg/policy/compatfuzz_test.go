package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genDeep writes a reference file of chains up to 40 levels deep, each
// level with a few siblings, so that fuzzing reaches the depth bound and
// wide levels as well as TestFlatRulesMatchTheWalk's small trees.
func genDeep(t *rapid.T, b *strings.Builder) (depth int) {
	depth = rapid.IntRange(1, MaxMatchEntries+8).Draw(t, "depth")
	b.WriteString("domain: d\ndescriptors: ")
	for i := range depth {
		b.WriteString("[")
		for j := range rapid.IntRange(0, 3).Draw(t, "siblings") {
			fmt.Fprintf(b, "{key: %s, value: %q, rate_limit: {unit: second, requests_per_unit: %d}}, ",
				rapid.SampledFrom(walkKeys).Draw(t, "key"), fmt.Sprintf("s%d_%d", i, j), rapid.IntRange(0, 9).Draw(t, "rpu"))
		}
		fmt.Fprintf(b, "{key: %s, ", rapid.SampledFrom(walkKeys).Draw(t, "key"))
		if rapid.Bool().Draw(t, "limited") {
			b.WriteString("rate_limit: {unit: minute, requests_per_unit: 5}, ")
		}
		b.WriteString("descriptors: ")
	}
	b.WriteString("[]" + strings.Repeat("}]", depth) + "\n")
	return depth
}

// FuzzCompatTree: a generated reference tree, deep or wide, compiles in
// well under 5 s; one deeper than a descriptor can be long is refused
// naming the depth, and every other decides as the reference's walk does
// (compatWalk).
func FuzzCompatTree(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(func(t *rapid.T) {
		var b strings.Builder
		depth := genDeep(t, &b)
		src := b.String()
		begin := time.Now()
		p, err := Parse("gen.yaml", []byte(src))
		if took := time.Since(begin); took > 5*time.Second {
			t.Fatalf("a tree %d levels deep took %v", depth, took)
		}
		if depth > MaxMatchEntries {
			if err == nil || !strings.Contains(err.Error(), "nested deeper than 32 levels") {
				t.Fatalf("a tree %d levels deep: %v", depth, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		r := &reader{file: "gen.yaml"}
		tree := r.compatParse(r.document([]byte(src)))
		for range 20 {
			entries := genEntries(t)
			want := compatWalk(tree.nodes, entries)
			got := p.Match("d", entries)
			if got != nil && got.NotLimited {
				got = nil
			}
			if (want == nil) != (got == nil) || got != nil && got.Line != want.line {
				t.Fatalf("%v: rule %+v, the walk gives %+v\n%s", entries, got, want, src)
			}
		}
	}))
}
