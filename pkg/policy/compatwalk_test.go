package policy

// The compat format's walk (envoyproxy/ratelimit's lookup) against the
// rules compatflat.go makes of it, and the round trip through export.go.

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The reference's lookup, written plainly from its description: walk the
// tree one entry at a time, taking the child with the entry's key and
// value, else the first wildcard child in file order that accepts
// key_value, else the child with the key and no value, and never back up;
// the descriptor is limited when the walk ends on its last entry at a
// node with a rate_limit.
func compatWalk(nodes []*compatNode, entries []Entry) *compatNode {
	level := nodes
	for i, e := range entries {
		var next *compatNode
		for _, n := range level {
			if n.key == e.Key && n.value != "" && n.value == e.Value {
				next = n
			}
		}
		if next == nil {
			for _, n := range level {
				if strings.Contains(n.composite, "*") && splitGlobMatch(n.composite, e.Key+"_"+e.Value) {
					next = n
					break
				}
			}
		}
		if next == nil {
			for _, n := range level {
				if n.key == e.Key && n.value == "" {
					next = n
				}
			}
		}
		switch {
		case next == nil:
			return nil
		case i == len(entries)-1:
			if next.limit != nil {
				return next
			}
			return nil
		}
		level = next.children
	}
	return nil
}

// splitGlobMatch is the reference's wildcard test, on the parts of the
// pattern split at each "*".
func splitGlobMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < fixed || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

var (
	walkKeys   = []string{"a", "b"}
	walkValues = []string{"", "", "x", "y", "x*", "*", "x*y", "xy", "*y"}
	walkProbe  = []string{"x", "y", "xy", "xay", "z", "", "x*"}
)

// genTree writes a random reference file; siblings never repeat a
// composite key.
func genTree(t *rapid.T, b *strings.Builder, indent string, depth int) {
	n := rapid.IntRange(0, 4).Draw(t, "children")
	seen := map[string]bool{}
	for range n {
		key := rapid.SampledFrom(walkKeys).Draw(t, "key")
		value := rapid.SampledFrom(walkValues).Draw(t, "value")
		if seen[key+"_"+value] {
			continue
		}
		seen[key+"_"+value] = true
		fmt.Fprintf(b, "%s- key: %s\n", indent, key)
		if value != "" {
			fmt.Fprintf(b, "%s  value: %q\n", indent, value)
		}
		if rapid.Bool().Draw(t, "limit") {
			b.WriteString(genLimit(t, indent))
		}
		if strings.Contains(value, "*") && rapid.Bool().Draw(t, "share") {
			fmt.Fprintf(b, "%s  share_threshold: true\n", indent)
		}
		if rapid.IntRange(0, 3).Draw(t, "shadow") == 0 {
			fmt.Fprintf(b, "%s  shadow_mode: true\n", indent)
		}
		if rapid.IntRange(0, 3).Draw(t, "quota") == 0 {
			fmt.Fprintf(b, "%s  quota_mode: true\n", indent)
		}
		if depth < 3 && rapid.Bool().Draw(t, "nested") {
			fmt.Fprintf(b, "%s  descriptors:\n", indent)
			genTree(t, b, indent+"    ", depth+1)
		}
	}
}

var limitNames = []string{"", "", "n1", "n2"}

func genLimit(t *rapid.T, indent string) string {
	if rapid.IntRange(0, 5).Draw(t, "unlimited") == 0 {
		return indent + "  rate_limit: {unlimited: true, replaces: [{name: n1}]}\n"
	}
	name := rapid.SampledFrom(limitNames).Draw(t, "name")
	var replaces string
	if other := rapid.SampledFrom(limitNames).Draw(t, "replaces"); other != "" && other != name {
		replaces = ", replaces: [{name: " + other + "}]"
	}
	unit := rapid.SampledFrom([]string{"second", "minute", "HOUR", "day", "week", "month", "year"}).Draw(t, "unit")
	return fmt.Sprintf("%s  rate_limit: {unit: %s, requests_per_unit: %d, name: %q%s}\n", indent, unit, rapid.IntRange(0, 9).Draw(t, "rpu"), name, replaces)
}

func genEntries(t *rapid.T) []Entry {
	n := rapid.IntRange(1, 4).Draw(t, "entries")
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{rapid.SampledFrom(walkKeys).Draw(t, "k"), rapid.SampledFrom(walkProbe).Draw(t, "v")}
	}
	return entries
}

// The first-match rules compatflat.go makes decide every descriptor as the
// walk does: the same node (by its line) or none.
func TestFlatRulesMatchTheWalk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		genTree(t, &b, "  ", 1)
		src := b.String()
		r := &reader{file: "gen.yaml"}
		root := r.document([]byte(src))
		if root == nil {
			t.Fatalf("%v\n%s", r.errs, src)
		}
		tree := r.compatParse(root)
		p, err := Parse("gen.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		for range 20 {
			entries := genEntries(t)
			want := compatWalk(tree.nodes, entries)
			got := p.Match("d", entries)
			if got != nil && got.NotLimited {
				got = nil
			}
			switch {
			case want == nil && got == nil:
			case want == nil || got == nil || got.Line != want.line:
				t.Fatalf("%v: rule %+v, the walk gives %+v\n%s", entries, got, want, src)
			}
		}
	})
}

// Importing a reference file and loading the native output gives the
// same decisions: the same rule (by name), limit, bucket and key for
// every descriptor.
func TestImportRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		genTree(t, &b, "  ", 1)
		compat, err := Parse("gen.yaml", []byte(b.String()))
		if err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		out, err := compat.NativeYAML()
		if err != nil {
			t.Fatal(err)
		}
		native, err := Parse("native.yaml", out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for range 20 {
			entries := genEntries(t)
			a, z := compat.Match("d", entries), native.Match("d", entries)
			if (a == nil) != (z == nil) {
				t.Fatalf("%v: %+v, imported %+v\n%s", entries, a, z, out)
			}
			if a != nil && !sameDecision(a, z, entries) {
				t.Fatalf("%v: %+v, imported %+v\n%s", entries, a, z, out)
			}
		}
	})
}

func sameDecision(a, z *Rule, entries []Entry) bool {
	same := a.Name == z.Name && a.Limit == z.Limit && a.Unlimited == z.Unlimited && a.NotLimited == z.NotLimited &&
		a.Deny == z.Deny && a.Shadow == z.Shadow && a.Quota == z.Quota && strings.Join(a.Replaces, ",") == strings.Join(z.Replaces, ",") &&
		a.Cost == z.Cost && a.MaxCost == z.MaxCost && a.OnStoreError == z.OnStoreError
	if a.HasBucket() {
		same = same && z.HasBucket() && a.Version.Params == z.Version.Params && string(a.AppendKey(nil, entries)) == string(z.AppendKey(nil, entries))
	}
	return same
}
