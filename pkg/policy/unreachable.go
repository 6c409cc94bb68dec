package policy

import "slices"

// Unreachable rules. Rule b can never match when an earlier rule a of its
// domain matches every descriptor b matches: a has b's keys and, at each
// position, a's pattern covers b's (any value covers everything, a prefix
// covers the exact values and longer prefixes that start with it, an exact
// value covers itself). Comparing each rule with every earlier one is
// quadratic: 29 s of CPU for a 58,560-rule file. Instead, a covering rule
// is looked up in the match index the way a descriptor is: in b's key
// sequence group, in each shape that can cover b (its exact positions are
// exact in b, its prefixes no longer than b's values), under the hash of
// b's values cut to that shape. A covering rule's exact values and
// prefixes are those cuts of b's values, so it is always among the
// candidates; candidates are then compared pattern by pattern, so a hash
// collision costs a comparison and never a wrong warning. The cost per rule
// is a few hashes per shape of its group, as for a request.

// unreachableBy returns the earliest rule of d that matches every
// descriptor b matches, which makes b unreachable; nil when there is none.
// Call it before adding b: then every rule it can return comes before b in
// the file.
func (d *domain) unreachableBy(b *Rule) *Rule {
	g := d.findGroup(b.Match)
	if g == nil {
		return nil
	}
	values := patternValues(b.Match)
	first := len(g.rules)
	for _, s := range g.shapes {
		if s.first >= first {
			break // this shape and the later ones have no earlier rule
		}
		if !s.canCover(b.Match) {
			continue
		}
		// canCover checked that every cut fits b's values.
		h, _ := valuesHash(d.seed, values, s.cut)
		for _, i := range s.byValues[h] {
			if i >= first {
				break
			}
			if coversRule(g.rules[i], b) {
				first = i
				break
			}
		}
	}
	if first < len(g.rules) {
		return g.rules[first]
	}
	return nil
}

// findGroup returns the group of the patterns' key sequence, nil when the
// domain has none.
func (d *domain) findGroup(match []Pattern) *group {
	keys := make([]string, len(match))
	for i, m := range match {
		keys[i] = m.Key
	}
	for g := d.groups[d.keysHash(keys)]; g != nil; g = g.next {
		if slices.Equal(g.keys, keys) {
			return g
		}
	}
	return nil
}

// canCover reports whether a rule of shape s could cover patterns of the
// same keys: where s takes an exact value the pattern must be exact, and
// where s takes a prefix of length n the pattern must be an exact value or
// a prefix at least n bytes long.
func (s *shapeIndex) canCover(match []Pattern) bool {
	for i, c := range s.cut {
		m := match[i]
		switch {
		case c < 0:
		case c == 0 && m.Kind != MatchExact:
			return false
		case c > 0 && (m.Kind == MatchAny || len(m.literal()) < c):
			return false
		}
	}
	return true
}

// coversRule reports whether rule a, placed before b, matches every
// descriptor b matches.
func coversRule(a, b *Rule) bool {
	if len(a.Match) != len(b.Match) {
		return false
	}
	for i := range a.Match {
		if !a.Match[i].covers(b.Match[i]) {
			return false
		}
	}
	return true
}

// patternValues are the patterns' values as descriptor entries (keys left
// empty): what the index hashes for a rule.
func patternValues(match []Pattern) []Entry {
	values := make([]Entry, len(match))
	for i, m := range match {
		values[i].Value = m.Value
	}
	return values
}
