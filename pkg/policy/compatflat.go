package policy

// "compat" means envoyproxy/ratelimit's configuration format
// (compatparse.go). From the reference's tree to rules. The reference walks a descriptor
// down its tree one entry at a time and never backs up: at each level it
// takes the child whose key and value are the entry's, else the first
// wildcard child (in file order) that accepts the value, else the child
// with the key and no value; the descriptor is limited when the walk
// ends, on its last entry, at a node with a rate_limit. Rules match by
// first match instead, so each key sequence K gets, depth first and in
// the walk's order of preference, the rules of each child's subtree
// followed by a not_limited rule for the child ("stop here") whenever a
// less preferred sibling could also accept the value: what the walk would
// not reach, no later rule matches either. A stop rule that an earlier
// rule makes unreachable is left out.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// compatRules turns a reference file's tree into the rules of its domain.
func (r *reader) compatRules(f *compatFile) *domain {
	d := newDomain(nil)
	ix := levelIndex{}
	for _, keys := range keySequences(f.nodes) {
		for _, fr := range emit(ix, keys, 0, f.nodes, nil) {
			rule := r.flatRule(f.domain, fr)
			if rule == nil {
				continue
			}
			prev := d.unreachableBy(rule)
			if prev != nil && rule.NotLimited {
				continue // a stop no descriptor reaches
			}
			rule.Name = uniqueName(d, rule.Name, rule.Line)
			if rule.NotLimited || rule.Unlimited {
				rule.Limit.Name = rule.Name // never replaced, never reported
			}
			rule.prefix = keyPrefix(rule.Domain, rule.Name)
			if prev != nil {
				first := fmt.Sprintf("%q (line %d) is always taken first", prev.Name, prev.Line)
				if prev.NotLimited {
					first = fmt.Sprintf("the walk always takes %q (line %d) first, and stops there without a limit", strings.TrimPrefix(prev.Name, "no-limit:"), prev.Line)
				}
				r.warn(rule.Line, at{domain: f.domain, rule: rule.Name}, "", errors.New("never matches: "+first))
			}
			d.add(rule)
		}
	}
	return d
}

// flatPath is a rule to make: the nodes walked, and for a stop rule the
// keys after the last node.
type flatPath struct {
	nodes []*compatNode
	rest  []string // stop rules only: keys that take any value
	stop  bool
}

// keySequences lists the key sequences of the nodes with a rate_limit, in
// file order, each once.
func keySequences(nodes []*compatNode) [][]string {
	var out [][]string
	seen := make(map[string]bool)
	var walk func(prefix []string, nodes []*compatNode)
	walk = func(prefix []string, nodes []*compatNode) {
		for _, n := range nodes {
			keys := append(slices.Clip(prefix), n.key)
			if id := strings.Join(keys, "\x00"); n.limit != nil && !seen[id] {
				seen[id] = true
				out = append(out, keys)
			}
			walk(keys, n.children)
		}
	}
	walk(nil, nodes)
	return out
}

// siblings indexes a level's nodes by key, each in the walk's order of
// preference, so that a key sequence visits only its own nodes: a file of
// n top-level keys costs n lookups, not n².
type siblings map[string][]*compatNode

// of returns the preference lists of a level, made once.
func (ix levelIndex) of(nodes []*compatNode) siblings {
	if len(nodes) == 0 {
		return nil
	}
	if s, ok := ix[&nodes[0]]; ok {
		return s
	}
	s := siblings{}
	for _, n := range nodes {
		s[n.key] = append(s[n.key], n)
	}
	for key, same := range s {
		s[key] = preference(same)
	}
	ix[&nodes[0]] = s
	return s
}

// preference is the walk's order among siblings of one key: exact
// values, then wildcards in file order, then the value-less node. The
// reference finds a wildcard node by its literal text first, with the
// exact values ("x*" is the map key of wildcard x*): where an earlier
// wildcard would take that text, the node comes first as an exact alias.
func preference(nodes []*compatNode) []*compatNode {
	var exact, wild, any []*compatNode
	for _, n := range nodes {
		switch {
		case n.value == "":
			any = append(any, n)
		case strings.Contains(n.value, "*"):
			if slices.ContainsFunc(wild, func(w *compatNode) bool { return w.pattern.Matches(n.value) }) {
				alias := *n
				alias.pattern = Pattern{Key: n.key, Value: n.value, Kind: MatchExact}
				alias.composite += "(literal)"
				exact = append(exact, &alias)
			}
			wild = append(wild, n)
		default:
			exact = append(exact, n)
		}
	}
	return slices.Concat(exact, wild, any)
}

// levelIndex holds the siblings of each level, by its first node.
type levelIndex map[**compatNode]siblings

// emit returns the rules, in order, for descriptors with keys that reach
// nodes at level i after walking prefix.
func emit(ix levelIndex, keys []string, i int, nodes []*compatNode, prefix []*compatNode) []flatPath {
	last := i == len(keys)-1
	cs := ix.of(nodes)[keys[i]]
	lists := make([][]flatPath, len(cs))
	for j, c := range cs {
		path := append(slices.Clip(prefix), c)
		switch {
		case !last:
			lists[j] = emit(ix, keys, i+1, c.children, path)
		case c.limit != nil:
			lists[j] = []flatPath{{nodes: path}}
		}
	}
	var out []flatPath
	for j, c := range cs {
		out = append(out, lists[j]...)
		if last && c.limit != nil {
			continue // its rule matches all the stop rule would
		}
		for k := j + 1; k < len(cs); k++ {
			if len(lists[k]) > 0 && overlaps(c, cs[k]) {
				out = append(out, flatPath{nodes: append(slices.Clip(prefix), c), rest: keys[i+1:], stop: true})
				break
			}
		}
	}
	return out
}

// overlaps reports whether a less preferred sibling b may accept a value
// that a accepts.
func overlaps(a, b *compatNode) bool {
	switch {
	case b.value == "":
		return true
	case a.pattern.Kind == MatchExact:
		return b.pattern.Matches(a.value)
	}
	// Two wildcards: their values start with their literal parts, so
	// they share none when neither literal starts the other.
	la, lb := a.pattern.literal(), b.pattern.literal()
	return strings.HasPrefix(la, lb) || strings.HasPrefix(lb, la)
}

// flatRule makes the rule of a path.
func (r *reader) flatRule(domainName string, fp flatPath) *Rule {
	leaf := fp.nodes[len(fp.nodes)-1]
	composites := make([]string, 0, len(fp.nodes)+len(fp.rest))
	rule := &Rule{Domain: domainName, Line: leaf.line, File: r.file}
	for _, n := range fp.nodes {
		pat := n.pattern
		pat.Metric = !fp.stop && (n.toMetric || leaf.detailed)
		rule.Match = append(rule.Match, pat)
		composites = append(composites, n.composite)
	}
	for _, k := range fp.rest {
		rule.Match = append(rule.Match, Pattern{Key: k, Kind: MatchAny})
		composites = append(composites, k)
	}
	rule.Name = strings.Join(composites, ".")
	if fp.stop {
		rule.Name = "no-limit:" + rule.Name
		rule.NotLimited = true
		return rule
	}
	l := leaf.limit
	rule.Limit = Limit{Name: l.name, Given: !l.unlimited, RequestsPerUnit: l.rpu, Unit: l.unit}
	rule.Replaces = l.replaces
	rule.Shadow, rule.Quota = leaf.shadow, leaf.quota
	switch {
	case l.unlimited:
		rule.Unlimited, rule.Shadow, rule.Quota, rule.Limit.Given = true, false, false, false
		return rule
	case l.rpu == 0:
		rule.Deny = true
		return rule
	}
	rate, err := unitRate(l.rpu, l.unit)
	var p bucket.Params
	if err == nil {
		p, err = bucket.NewParams(int64(l.rpu), rate)
	}
	rule.Bands = []Band{{params: p}}
	if err != nil {
		r.fail(nil, at{domain: domainName, rule: rule.Name}, "rate_limit", err)
		r.errs[len(r.errs)-1].Line = leaf.line
		return nil
	}
	rule.Cost, rule.MaxCost, rule.Charge = 1, int64(l.rpu), r.refCharge
	if rule.PostPaid() {
		// Every hit counted, to one window's worth of debt (the band's
		// capacity, requests_per_unit): the bucket is whole again within
		// two windows.
		rule.MaxCost = 0
		r.maxDebt(rule, nil, at{}, true)
	}
	return rule
}

// uniqueName is name, or name#line when the domain has it already (paths
// can collide: key "a" value "x.b" and key "a_x" then "b").
func uniqueName(d *domain, name string, line int) string {
	if d.byName[name] == nil {
		return name
	}
	for n := 0; ; n++ {
		alt := fmt.Sprintf("%s#%d", name, line+n)
		if d.byName[alt] == nil {
			return alt
		}
	}
}
