package policy

// The native fields that carry what the envoyproxy/ratelimit format can
// say and a plain bucket cannot: current_limit (what a status reports),
// replaces, not_limited, capacity 0 (deny everything) and a match entry's
// shared. `tokengate import` writes them; anyone may.

import (
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/bucket"
)

var (
	currentLimitFields = []string{"requests_per_unit", "unit", "name"}
	// denyFields are the fields a rule of capacity 0 may have.
	denyFields = []string{"capacity", "shadow", "current_limit", "quota"}
)

// flag reads an optional boolean field; bad is true when it is invalid.
func (r *reader) flag(f map[string]*yaml.Node, a at, field string) (v, bad bool) {
	n := f[field]
	if n == nil {
		return false, false
	}
	v, err := boolean(n)
	if err != nil {
		r.fail(n, a, field, err)
		return false, true
	}
	return v, false
}

// shared reads a match entry's shared flag: only a pattern that accepts
// more than one value can share its bucket among them.
func (r *reader) shared(n *yaml.Node, p Pattern) (bool, error) {
	v, err := boolean(n)
	if err == nil && v && p.Kind == MatchExact {
		err = errors.New("only a value with a \"*\", or no value, accepts more than one value to share a bucket")
	}
	return v, err
}

// deny reads a rule of capacity 0: it answers OVER_LIMIT to everything and
// has no bucket, so the other bucket fields mean nothing.
func (r *reader) deny(rule *Rule, f map[string]*yaml.Node, a at) {
	rule.Deny = true
	for _, field := range bucketFields {
		if v := f[field]; v != nil && !slices.Contains(denyFields, field) {
			r.fail(v, a, field, errors.New("not allowed on a rule of capacity 0 (it denies everything and has no bucket)"))
		}
	}
	rule.Shadow, _ = r.flag(f, a, "shadow")
	rule.Quota, _ = r.flag(f, a, "quota")
	r.currentLimit(rule, f, a)
}

// currentLimit reads current_limit's requests_per_unit and unit, which
// must say the rule's refill rate (0 for a rule of capacity 0); the name
// is limitName's.
func (r *reader) currentLimit(rule *Rule, f map[string]*yaml.Node, a at) {
	n := f["current_limit"]
	if n == nil {
		return
	}
	cf := r.fields(n, a, "current_limit", currentLimitFields)
	if cf == nil {
		return
	}
	rn, un := cf["requests_per_unit"], cf["unit"]
	if (rn == nil) != (un == nil) {
		r.fail(n, a, "current_limit", errors.New("give requests_per_unit and unit together, or neither"))
		return
	}
	if rn == nil {
		return
	}
	rpu, err := requestsPerUnit(rn)
	if err != nil {
		r.fail(rn, a, "current_limit", fmt.Errorf("requests_per_unit: %w", err))
		return
	}
	s, err := text(un)
	var unit Unit
	if err == nil {
		unit, err = ParseUnit(s)
	}
	if err != nil {
		r.fail(un, a, "current_limit", err)
		return
	}
	if err := sameRate(rule, rpu, unit); err != nil {
		r.fail(rn, a, "current_limit", err)
		return
	}
	rule.Limit.Given, rule.Limit.RequestsPerUnit, rule.Limit.Unit = true, rpu, unit
}

// requestsPerUnit reads a requests_per_unit: a whole number that fits in
// 32 bits, as the reference's is.
func requestsPerUnit(n *yaml.Node) (uint32, error) {
	v, err := integer(n)
	if err == nil && (v < 0 || v > 1<<32-1) {
		err = fmt.Errorf("%d is out of range [0, %d]", v, uint32(1<<32-1))
	}
	if err != nil {
		return 0, err
	}
	return uint32(v), nil
}

// sameRate checks that rpu per unit is the rule's refill rate.
func sameRate(rule *Rule, rpu uint32, unit Unit) error {
	if rule.Deny {
		if rpu != 0 {
			return fmt.Errorf("requests_per_unit %d: a rule of capacity 0 allows 0", rpu)
		}
		return nil
	}
	if len(rule.Bands) > 1 {
		return errors.New("requests_per_unit and unit: not with several limits (each says its own rate; give current_limit only a name)")
	}
	want := rule.Bands[0].params.Rate()
	got, err := unitRate(rpu, unit)
	if err != nil || got != want {
		return fmt.Errorf("%d per %s is not the refill rate %s", rpu, unit, want)
	}
	return nil
}

// limitName sets the rule's limit name: current_limit.name when given
// (even empty: such a limit is never replaced), else the rule's name.
func (r *reader) limitName(rule *Rule, f map[string]*yaml.Node, a at) {
	rule.Limit.Name = rule.Name
	n := f["current_limit"]
	if n == nil {
		return
	}
	if v := lookup(n, "name"); v != nil {
		s, err := text(v)
		if err != nil {
			r.fail(v, a, "current_limit", fmt.Errorf("name: %w", err))
			return
		}
		rule.Limit.Name = s
	}
}

// replaces reads a list of limit names; own is the rule's.
func (r *reader) replaces(n *yaml.Node, a at, own string) []string {
	if n.Kind != yaml.SequenceNode {
		r.fail(n, a, "replaces", fmt.Errorf("want a list of limit names, got %s", describe(n)))
		return nil
	}
	names := make([]string, 0, len(n.Content))
	for _, v := range n.Content {
		s, err := identifier(v)
		switch {
		case err != nil:
			r.fail(v, a, "replaces", err)
		case s == own:
			r.fail(v, a, "replaces", fmt.Errorf("%q is the rule's own limit name", s))
		default:
			names = append(names, s)
		}
	}
	return names
}

// unitRate is requests per unit as a refill rate.
func unitRate(rpu uint32, u Unit) (bucket.Rate, error) {
	return bucket.NewRate(int64(rpu), u.Duration())
}
