package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/bucket"
)

var (
	topFields   = []string{"revision", "request_id_key", "domains", "front_doors"}
	ruleFields  = []string{"name", "match", "capacity", "refill", "cost", "max_cost", "charge", "max_debt", "reserve", "reserve_ttl", "on_resize", "on_store_error", "shadow", "unlimited", "not_limited", "current_limit", "replaces", "quota", "limits"}
	entryFields = []string{"key", "value", "shared", "literal", "metric"}
	// bucketFields only make sense on a rule with a bucket.
	bucketFields = []string{"capacity", "refill", "cost", "max_cost", "charge", "max_debt", "reserve", "reserve_ttl", "on_resize", "on_store_error", "shadow", "current_limit", "quota", "limits"}
)

func (r *reader) policy(root *yaml.Node, p *Policy) {
	f := r.fields(root, at{}, "policy", topFields)
	if f == nil {
		return
	}
	if n := f["revision"]; n != nil {
		v, err := integer(n)
		if err == nil && v < 0 {
			err = fmt.Errorf("%d is negative", v)
		}
		if err != nil {
			r.fail(n, at{}, "revision", err)
		}
		p.revision = v
	}
	if n := f["request_id_key"]; n != nil {
		s, err := identifier(n)
		if err != nil {
			r.fail(n, at{}, "request_id_key", err)
		}
		p.requestIDKey = s
	}
	n := f["domains"]
	if n == nil {
		r.fail(root, at{}, "domains", errors.New("missing"))
		return
	}
	if n.Kind != yaml.MappingNode {
		r.fail(n, at{}, "domains", fmt.Errorf("want a mapping of domain names to lists of rules, got %s", describe(n)))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, err := identifier(k)
		if err != nil {
			r.fail(k, at{}, "domains", fmt.Errorf("domain name: %w", err))
			continue
		}
		d := r.domain(name, v, p.requestIDKey)
		d.line = k.Line
		if p.domains[name] != nil {
			// Its rules were read all the same, so that their problems
			// are reported too.
			r.fail(k, at{domain: name}, "", errors.New("repeated domain"))
			continue
		}
		p.domains[name] = d
		p.names = append(p.names, name)
	}
	if len(n.Content) == 0 {
		r.warn(n.Line, at{}, "domains", errors.New("empty: the policy limits nothing (every request is answered OK)"))
	}
	slices.Sort(p.names)
	if n := f["front_doors"]; n != nil {
		r.frontDoors(n, p)
	}
}

// identifier reads a domain, rule or key name: a non-empty string of
// printable characters.
func identifier(n *yaml.Node) (string, error) {
	s, err := text(n)
	switch {
	case err != nil:
		return "", err
	case s == "":
		return "", errors.New("empty")
	case strings.IndexFunc(s, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0:
		return "", fmt.Errorf("%q has characters that are not printable", s)
	}
	return s, nil
}

// domain reads the rules of one domain and warns about rules that an
// earlier rule makes unreachable. A repeated name is reported whatever else is
// wrong with either rule.
func (r *reader) domain(name string, n *yaml.Node, requestIDKey string) *domain {
	d := newDomain(nil)
	if n.Kind != yaml.SequenceNode {
		r.fail(n, at{domain: name}, "", fmt.Errorf("want a list of rules, got %s", describe(n)))
		return d
	}
	if len(n.Content) == 0 {
		r.warn(n.Line, at{domain: name}, "", errors.New("no rules: every request to this domain is answered OK"))
	}
	lines := make(map[string]int)
	for i, rn := range n.Content {
		repeated := r.repeatedName(rn, at{domain: name, index: i + 1}, lines)
		rule := r.rule(rn, name, i+1)
		r.reserveNeedsID(rn, name, i+1, requestIDKey)
		if rule == nil || repeated {
			continue
		}
		a := at{domain: name, rule: rule.Name}
		if len(rule.Match) == 1 && rule.Match[0].Key == requestIDKey {
			r.warn(rule.Line, a, "match", fmt.Errorf("key %q is the request_id_key: such descriptors carry the request id and never match a rule", requestIDKey))
		}
		if prev := d.unreachableBy(rule); prev != nil {
			r.warn(rule.Line, a, "", fmt.Errorf("never matches: rule %q (line %d) comes first and matches everything it would", prev.Name, prev.Line))
		}
		d.add(rule)
	}
	return d
}

// repeatedName records the name of rule node n in lines (name -> line of
// its first rule) and reports whether an earlier rule has it.
func (r *reader) repeatedName(n *yaml.Node, a at, lines map[string]int) bool {
	v := lookup(n, "name")
	if v == nil {
		return false
	}
	name, err := identifier(v)
	if err != nil {
		return false // rule reports it
	}
	if first := lines[name]; first != 0 {
		a.rule = name
		r.fail(v, a, "name", fmt.Errorf("repeated in the domain (first at line %d)", first))
		return true
	}
	lines[name] = n.Line
	return false
}

// rule reads one rule; nil when it has errors (they are recorded).
func (r *reader) rule(n *yaml.Node, domainName string, index int) *Rule {
	a := at{domain: domainName, index: index}
	// Read the name first so that every other issue names the rule.
	if v := lookup(n, "name"); v != nil {
		a.rule, _ = identifier(v)
	}
	before := len(r.errs)
	f := r.fields(n, a, "rule", ruleFields)
	if f == nil {
		return nil
	}
	rule := &Rule{Domain: domainName, Name: a.rule, File: r.file, Line: n.Line}
	if v := f["name"]; v == nil {
		r.fail(n, a, "name", errors.New("missing"))
	} else if _, err := identifier(v); err != nil {
		r.fail(v, a, "name", err)
	}
	if v := f["match"]; v == nil {
		r.fail(n, a, "match", errors.New("missing"))
	} else {
		rule.Match = r.match(v, a)
	}
	var badUnlimited, badNot bool
	rule.Unlimited, badUnlimited = r.flag(f, a, "unlimited")
	rule.NotLimited, badNot = r.flag(f, a, "not_limited")
	bad := badUnlimited || badNot
	switch {
	case rule.Unlimited && rule.NotLimited:
		r.fail(f["not_limited"], a, "not_limited", errors.New("not allowed with unlimited: true"))
	case rule.Unlimited || rule.NotLimited:
		what := "an unlimited rule"
		if rule.NotLimited {
			what = "a not_limited rule"
		}
		for _, field := range bucketFields {
			if v := f[field]; v != nil {
				r.fail(v, a, field, fmt.Errorf("not allowed on %s (it has no bucket)", what))
			}
		}
	case bad && !slices.ContainsFunc(bucketFields, func(field string) bool { return f[field] != nil }):
		// Meant to be unlimited, most likely: "capacity: missing" would
		// only be noise next to the unlimited error.
	default:
		r.limits(rule, n, f, a)
	}
	r.limitName(rule, f, a)
	if v := f["replaces"]; v != nil {
		if rule.NotLimited {
			r.fail(v, a, "replaces", errors.New("not allowed on a not_limited rule (it is no limit)"))
		} else {
			rule.Replaces = r.replaces(v, a, rule.Limit.Name)
		}
	}
	if len(r.errs) > before {
		return nil
	}
	rule.prefix = keyPrefix(rule.Domain, rule.Name)
	return rule
}

func (r *reader) match(n *yaml.Node, a at) []Pattern {
	if n.Kind != yaml.SequenceNode {
		r.fail(n, a, "match", fmt.Errorf("want a list of {key, value} entries, got %s", describe(n)))
		return nil
	}
	if len(n.Content) == 0 {
		r.fail(n, a, "match", errors.New("empty: a rule needs at least one entry"))
		return nil
	}
	if len(n.Content) > MaxMatchEntries {
		r.fail(n, a, "match", fmt.Errorf("%d entries: a descriptor has at most %d, so the rule could never match", len(n.Content), MaxMatchEntries))
		return nil
	}
	patterns := make([]Pattern, 0, len(n.Content))
	for i, en := range n.Content {
		f := r.fields(en, a, fmt.Sprintf("match entry %d", i+1), entryFields)
		if f == nil {
			continue
		}
		kn := f["key"]
		if kn == nil {
			r.fail(en, a, "match", fmt.Errorf("entry %d: key: missing", i+1))
			continue
		}
		key, err := identifier(kn)
		if err != nil {
			r.fail(kn, a, "match", fmt.Errorf("entry %d: key: %w", i+1, err))
			continue
		}
		var value string
		vn := f["value"]
		if vn != nil {
			if value, err = text(vn); err != nil {
				r.fail(vn, a, "match", fmt.Errorf("entry %d (key %q): value: %w", i+1, key, err))
				continue
			}
		}
		pat, err := parsePattern(key, value, vn != nil)
		if literal, _ := r.flag(f, a, "literal"); literal && err == nil {
			if vn == nil || value == "" {
				r.fail(f["literal"], a, "match", fmt.Errorf("entry %d (key %q): literal: needs a value", i+1, key))
				continue
			}
			// The value as is: a "*" in it is a plain character.
			pat = Pattern{Key: key, Value: value, Kind: MatchExact}
		}
		if err != nil {
			r.fail(vn, a, "match", fmt.Errorf("entry %d (key %q): value %q: %w", i+1, key, value, err))
			continue
		}
		pat.Metric, _ = r.flag(f, a, "metric")
		if sn := f["shared"]; sn != nil {
			if pat.Shared, err = r.shared(sn, pat); err != nil {
				r.fail(sn, a, "match", fmt.Errorf("entry %d (key %q): shared: %w", i+1, key, err))
				continue
			}
		}
		patterns = append(patterns, pat)
	}
	return patterns
}

// limits reads a limited rule's bucket fields and checks them together.
func (r *reader) limits(rule *Rule, n *yaml.Node, f map[string]*yaml.Node, a at) {
	paramsOK, deny := r.bands(rule, n, f, a)
	if deny {
		r.deny(rule, f, a)
		return
	}
	if r.charge(rule, f, a, paramsOK) {
		r.costs(rule, n, f, a, rule.minCapacity(), paramsOK)
	}
	enumField(r, f, a, "on_resize", bucket.ParseResizeMode, &rule.OnResize)
	enumField(r, f, a, "on_store_error", ParseStoreErrorMode, &rule.OnStoreError)
	rule.storeErrorNamed = f["on_store_error"] != nil
	rule.Shadow, _ = r.flag(f, a, "shadow")
	rule.Quota, _ = r.flag(f, a, "quota")
	r.reserve(rule, f, a, paramsOK)
	if paramsOK {
		r.currentLimit(rule, f, a)
	}
}

// costs reads a rule's cost and, for a pre-paid one, its max_cost
// (limits; an every_hit rule refuses no cost).
func (r *reader) costs(rule *Rule, n *yaml.Node, f map[string]*yaml.Node, a at, capacity int64, paramsOK bool) {
	rule.Cost = 1
	if cost, ok := r.intField(n, f, a, "cost", false); ok {
		rule.Cost = cost
		if cost < 0 {
			r.fail(f["cost"], a, "cost", fmt.Errorf("%d is negative", cost))
		} else if paramsOK && cost > capacity {
			r.fail(f["cost"], a, "cost", fmt.Errorf("%d exceeds capacity %d", cost, capacity))
		}
	}
	if rule.PostPaid() {
		return
	}
	rule.MaxCost = capacity
	if maxCost, ok := r.intField(n, f, a, "max_cost", false); ok {
		rule.MaxCost = maxCost
		switch {
		case maxCost < 1:
			r.fail(f["max_cost"], a, "max_cost", fmt.Errorf("%d is below 1", maxCost))
		case paramsOK && maxCost > capacity:
			r.fail(f["max_cost"], a, "max_cost", fmt.Errorf("%d exceeds capacity %d", maxCost, capacity))
		case rule.Cost > maxCost:
			r.fail(f["cost"], a, "cost", fmt.Errorf("%d exceeds max_cost %d", rule.Cost, maxCost))
		}
	}
}

// intField reads an integer field; ok is false when it is absent (an error
// when required) or invalid.
func (r *reader) intField(n *yaml.Node, f map[string]*yaml.Node, a at, field string, required bool) (int64, bool) {
	v := f[field]
	if v == nil {
		if required {
			r.fail(n, a, field, errors.New("missing (or set unlimited: true)"))
		}
		return 0, false
	}
	x, err := integer(v)
	if err != nil {
		r.fail(v, a, field, err)
		return 0, false
	}
	return x, true
}

// enumField reads field of f, when present, into dst with parse, and
// reports (failing the file) a value that is not text or that parse
// refuses; it returns false then.
func enumField[T any](r *reader, f map[string]*yaml.Node, a at, field string, parse func(string) (T, error), dst *T) bool {
	v := f[field]
	if v == nil {
		return true
	}
	s, err := text(v)
	if err == nil {
		*dst, err = parse(s)
	}
	if err != nil {
		r.fail(v, a, field, err)
		return false
	}
	return true
}
