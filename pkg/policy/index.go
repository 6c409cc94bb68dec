package policy

// The match index. A descriptor can only match rules with exactly its key
// sequence, so a domain's rules are grouped by key sequence, found through
// a hash of the keys. Within a group, rules are indexed by shape — which
// positions take any value, which an exact value and which a prefix of
// which length — and, per shape, by a hash of the exact values and
// prefixes. A lookup hashes the descriptor's keys (maphash, no
// allocation), checks them once, then for each shape of the group hashes
// the descriptor's values cut to that shape and takes the earliest
// candidate whose values really match; the earliest over all shapes, in
// file order, wins. Hashes only narrow the candidates: every candidate is
// compared value by value, so a collision costs a comparison and never a
// wrong answer. Candidate lists come from the policy file, never from
// request data. A group usually has a handful of shapes (one per distinct
// set of prefix lengths), so a lookup costs a few hashes whatever the
// number of rules.

import (
	"hash/maphash"
	"slices"
)

// domain is one domain's rules, in file order, and their index.
type domain struct {
	line   int // where the domain starts in its file
	rules  []*Rule
	byName map[string]*Rule
	seed   maphash.Seed
	groups map[uint64]*group // by keysHash
}

// group is the rules of a domain with one key sequence, in file order.
type group struct {
	keys   []string
	rules  []*Rule
	shapes []shapeIndex
	next   *group // another key sequence with the same hash
}

// shapeIndex holds the rules of a group that have one shape.
type shapeIndex struct {
	// cut says, per position, what of the value the rules compare: -1
	// nothing (any value), 0 all of it (exact), n > 0 its first n bytes
	// (a prefix of length n).
	cut      []int
	byValues map[uint64][]int // valuesHash -> indexes into rules, in file order
	// first is the index of the shape's earliest rule. Shapes are made in
	// file order, so a group's shapes are in increasing order of first.
	first int
}

// newDomain indexes rules, in file order.
func newDomain(rules []*Rule) *domain {
	d := &domain{byName: make(map[string]*Rule, len(rules)), seed: maphash.MakeSeed(), groups: make(map[uint64]*group)}
	for _, r := range rules {
		d.add(r)
	}
	return d
}

// add appends r to the domain's rules, after every rule already there; its
// name must be new to the domain.
func (d *domain) add(r *Rule) {
	d.rules = append(d.rules, r)
	d.byName[r.Name] = r
	keys := make([]string, len(r.Match))
	values := patternValues(r.Match)
	cut := make([]int, len(r.Match))
	for i, m := range r.Match {
		keys[i] = m.Key
		switch m.Kind {
		case MatchAny:
			cut[i] = -1
		case MatchPrefix, MatchGlob:
			// A glob is indexed by its literal start; valuesMatch checks
			// the rest.
			if cut[i] = len(m.literal()); cut[i] == 0 {
				cut[i] = -1
			}
		}
	}
	g := d.group(keys)
	x := slices.IndexFunc(g.shapes, func(s shapeIndex) bool { return slices.Equal(s.cut, cut) })
	if x < 0 {
		x = len(g.shapes)
		g.shapes = append(g.shapes, shapeIndex{cut: cut, byValues: make(map[uint64][]int), first: len(g.rules)})
	}
	// The rule's own values are as long as the cut, so they always hash.
	h, _ := valuesHash(d.seed, values, cut)
	g.shapes[x].byValues[h] = append(g.shapes[x].byValues[h], len(g.rules))
	g.rules = append(g.rules, r)
}

// group returns the group of a key sequence, creating it.
func (d *domain) group(keys []string) *group {
	h := d.keysHash(keys)
	first := d.groups[h]
	for g := first; g != nil; g = g.next {
		if slices.Equal(g.keys, keys) {
			return g
		}
	}
	g := &group{keys: keys, next: first}
	d.groups[h] = g
	return g
}

func (d *domain) keysHash(keys []string) uint64 {
	h := uint64(len(keys))
	for _, k := range keys {
		h = mix(h, maphash.String(d.seed, k))
	}
	return h
}

func (d *domain) match(entries []Entry) *Rule {
	// The hash of the keys, as group computes it.
	h := uint64(len(entries))
	for _, e := range entries {
		h = mix(h, maphash.String(d.seed, e.Key))
	}
	for g := d.groups[h]; g != nil; g = g.next {
		if g.hasKeys(entries) {
			return g.match(d.seed, entries)
		}
	}
	return nil
}

func (g *group) hasKeys(entries []Entry) bool {
	if len(entries) != len(g.keys) {
		return false
	}
	for i, k := range g.keys {
		if entries[i].Key != k {
			return false
		}
	}
	return true
}

// match returns the first rule of g, in file order, whose patterns accept
// the entries' values; the entries have g's keys.
func (g *group) match(seed maphash.Seed, entries []Entry) *Rule {
	first := len(g.rules)
	for _, s := range g.shapes {
		if s.first >= first {
			break // this shape and the later ones have no earlier rule
		}
		h, ok := valuesHash(seed, entries, s.cut)
		if !ok {
			continue
		}
		for _, i := range s.byValues[h] {
			if i >= first {
				break
			}
			if g.rules[i].valuesMatch(entries) {
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

// valuesMatch reports whether r's patterns accept the entries' values; the
// caller has checked the keys.
func (r *Rule) valuesMatch(entries []Entry) bool {
	for i, m := range r.Match {
		if m.Kind != MatchAny && !m.Matches(entries[i].Value) {
			return false
		}
	}
	return true
}

// mix folds one string hash into an order-sensitive running hash.
func mix(h, x uint64) uint64 { return (h ^ x) * 0x9e3779b97f4a7c15 }

func valuesHash(seed maphash.Seed, entries []Entry, cut []int) (h uint64, ok bool) {
	h = uint64(len(cut))
	for i, c := range cut {
		v := entries[i].Value
		switch {
		case c < 0:
			continue
		case c > len(v):
			return 0, false
		case c > 0:
			v = v[:c]
		}
		h = mix(h, maphash.String(seed, v))
	}
	return h, true
}
