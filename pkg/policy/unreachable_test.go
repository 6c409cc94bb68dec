package policy

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestUnreachableIsTheScan: the index finds the same rule that makes a
// rule unreachable as comparing a rule with every earlier one in file
// order, whatever mix of exact, prefix and wildcard patterns and key
// sequences the domain has; and a rule it calls unreachable is never what
// a descriptor matches.
func TestUnreachableIsTheScan(t *testing.T) {
	keys := []string{"a", "b"}
	values := []string{"x", "xy", "xyz", "y"}
	drawPattern := func(t *rapid.T) Pattern {
		p := Pattern{Key: rapid.SampledFrom(keys).Draw(t, "key"), Kind: MatchKind(rapid.IntRange(0, 2).Draw(t, "kind"))}
		if p.Kind != MatchAny {
			p.Value = rapid.SampledFrom(values).Draw(t, "value")
		}
		return p
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "rules")
		d := newDomain(nil)
		unreachable := make(map[*Rule]bool)
		for i := range n {
			r := &Rule{Name: fmt.Sprint(i), Line: i + 1, Match: rapid.SliceOfN(rapid.Custom(drawPattern), 1, 3).Draw(t, "match")}
			var want *Rule
			for _, prev := range d.rules {
				if coversRule(prev, r) {
					want = prev
					break
				}
			}
			if got := d.unreachableBy(r); got != want {
				t.Fatalf("rule %v: unreachable by %v, want %v", r.Match, got, want)
			}
			unreachable[r] = want != nil
			d.add(r)
		}
		for range 30 {
			desc := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Entry {
				return Entry{Key: rapid.SampledFrom(keys).Draw(t, "key"), Value: rapid.SampledFrom(append(values, "z")).Draw(t, "value")}
			}), 1, 3).Draw(t, "descriptor")
			if r := d.match(desc); r != nil && unreachable[r] {
				t.Fatalf("descriptor %v matched %v, which was found unreachable", desc, r.Match)
			}
		}
	})
}
