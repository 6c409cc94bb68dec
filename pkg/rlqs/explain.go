package rlqs

import (
	"fmt"
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
	f := fillOf(rule.Version.Params.Rate(), rule.Cost)
	return entries, fmt.Sprintf("token_bucket of rule %s: %d requests (of %d tokens) per fill_interval %v shared by the streams that report it (a lone stream: max_tokens %d, tokens_per_fill %d), each lease paid from the bucket before Envoy spends it",
		rule.Name, f.tokens, f.unit, time.Duration(f.interval), f.tokens, f.tokens), nil
}
