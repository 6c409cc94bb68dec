package rlqs

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokengate/tokengate/pkg/policy"
)

// Explain says what the RLQS service does with a BucketId of domain under
// pol (`tokengate explain --rlqs`): the entries in the order of the rule
// the BucketId reaches (in key order when it reaches none), which
// pol.Explain describes as a descriptor, and the assignment a stream is
// sent. Bad BucketIds are errors, as the service refuses them.
func Explain(pol *policy.Policy, domain string, id map[string]string) ([]policy.Entry, string, error) {
	if err := checkBucketID(id); err != nil {
		return nil, "", err
	}
	rule, entries := newOrders(pol).match(domain, id)
	switch {
	case rule == nil:
		keys := make([]string, 0, len(id))
		for k := range id {
			keys = append(keys, k)
		}
		keySet(keys)
		for _, k := range keys {
			entries = append(entries, policy.Entry{Key: k, Value: id[k]})
		}
		return entries, "blanket_rule ALLOW_ALL: no rule limits it", nil
	case rule.Unlimited || rule.NotLimited:
		return entries, "blanket_rule ALLOW_ALL: rule " + rule.Name + " does not limit it", nil
	case rule.Deny:
		return entries, "blanket_rule DENY_ALL: rule " + rule.Name + " has capacity 0", nil
	case rule.Shadow:
		return entries, "blanket_rule ALLOW_ALL: rule " + rule.Name + " is a shadow rule; its reports are charged", nil
	}
	f := fillOfRule(rule)
	s := fmt.Sprintf("token_bucket of rule %s: %d requests (of %d tokens) per fill_interval %v shared by the streams that report it (a lone stream: max_tokens %d, tokens_per_fill %d), each lease paid from the bucket before Envoy spends it",
		rule.Name, f.tokens, f.unit, time.Duration(f.interval), f.tokens, f.tokens)
	if !rule.Plain() {
		s += "; " + bandsNote(rule)
	}
	return entries, s, nil
}

// bandsNote says how a rule of several limits, or of a calendar budget,
// is leased: from every band at once, at the slowest band's rate.
func bandsNote(rule *policy.Rule) string {
	parts := make([]string, len(rule.Bands))
	refills := false
	for i := range rule.Bands {
		parts[i] = rule.Bands[i].String()
		refills = refills || rule.Bands[i].Budget == nil
	}
	s := fmt.Sprintf("each lease is paid from all %d of its limits at once [%s]", len(parts), strings.Join(parts, "; "))
	switch {
	case !rule.HasBudget():
		return s + ", at the slowest one's rate"
	case refills:
		return s + ", at the slowest refilling one's rate, and ends with a budget's period"
	}
	return s + ", at the budget's pace (over its longest period), and ends with its period"
}

// Reach lists what RLQS does differently from descriptors under pol
// (`tokengate validate`): a BucketId has no order, so a rule whose keys an
// earlier rule has in another order is met only by the BucketIds that
// earlier rule refuses, and never when that rule takes any value. One line
// a rule, in file order; none when every rule is met as a descriptor is.
// Then, domain by domain, a line for each rule of several limits or of a
// calendar budget: how its leases are paid (bandsNote).
func Reach(pol *policy.Policy) []string {
	var notes []string
	for _, d := range pol.Domains() {
		rules := pol.Rules(d)
		for j, r := range rules {
			for _, e := range rules[:j] {
				if !otherOrder(e, r) {
					continue
				}
				if takesAny(e) {
					notes = append(notes, fmt.Sprintf("rlqs: domain %q rule %q (%s:%d): no BucketId reaches it: rule %q has its keys in another order and takes any value", d, r.Name, r.File, r.Line, e.Name))
				} else {
					notes = append(notes, fmt.Sprintf("rlqs: domain %q rule %q (%s:%d): a BucketId rule %q (its keys in another order) accepts meets that rule first", d, r.Name, r.File, r.Line, e.Name))
				}
				break
			}
		}
		for _, r := range rules {
			if r.HasBucket() && !r.Deny && !r.Plain() {
				notes = append(notes, fmt.Sprintf("rlqs: domain %q rule %q (%s:%d): %s", d, r.Name, r.File, r.Line, bandsNote(r)))
			}
		}
	}
	return notes
}

// otherOrder says whether a and b have one set of keys in two orders.
func otherOrder(a, b *policy.Rule) bool {
	if len(a.Match) != len(b.Match) {
		return false
	}
	ka, kb := make([]string, len(a.Match)), make([]string, len(b.Match))
	same := true
	for i := range a.Match {
		ka[i], kb[i] = a.Match[i].Key, b.Match[i].Key
		same = same && ka[i] == kb[i]
	}
	return !same && keySet(ka) == keySet(kb)
}

// takesAny says whether r accepts every value at every position.
func takesAny(r *policy.Rule) bool {
	for _, m := range r.Match {
		if m.Kind != policy.MatchAny {
			return false
		}
	}
	return true
}
