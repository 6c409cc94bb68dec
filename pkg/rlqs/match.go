package rlqs

// Matching a BucketId to a rule. A BucketId is an unordered map; a rule
// matches a descriptor whose entries are in the rule's key order. So each
// policy gets, once, the key orders its rules use, grouped by their set of
// keys (sorted); a BucketId is put into each order of its key set and
// matched through the policy's own match index (Policy.Match), the
// earliest rule in file order winning, and its bucket key is the one
// Rule.AppendKey builds, the same bucket a ShouldRateLimit descriptor with
// those entries in that order decides on.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
)

// orders is one policy's key orders: by domain, then by key set (the
// sorted keys joined by a NUL), the key sequences of its rules in the
// order they first appear. position is each rule's index in its domain.
type orders struct {
	pol      *policy.Policy
	byKeys   map[string]map[string][][]string
	position map[*policy.Rule]int
}

func newOrders(pol *policy.Policy) *orders {
	o := &orders{pol: pol, byKeys: make(map[string]map[string][][]string), position: make(map[*policy.Rule]int)}
	for _, d := range pol.Domains() {
		sets := make(map[string][][]string)
		for i, r := range pol.Rules(d) {
			o.position[r] = i
			keys := make([]string, len(r.Match))
			for j, m := range r.Match {
				keys[j] = m.Key
			}
			set := keySet(slices.Clone(keys))
			if !slices.ContainsFunc(sets[set], func(k []string) bool { return slices.Equal(k, keys) }) {
				sets[set] = append(sets[set], keys)
			}
		}
		o.byKeys[d] = sets
	}
	return o
}

// keySet sorts keys in place and joins them.
func keySet(keys []string) string {
	slices.Sort(keys)
	return strings.Join(keys, "\x00")
}

// match is a BucketId's rule in domain (nil: none) and the entries in that
// rule's order; the BucketId must have passed checkBucketID.
func (o *orders) match(domain string, id map[string]string) (*policy.Rule, []policy.Entry) {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	var best *policy.Rule
	var bestEntries []policy.Entry
	for _, order := range o.byKeys[domain][keySet(keys)] {
		entries := make([]policy.Entry, len(order))
		for i, k := range order {
			entries[i] = policy.Entry{Key: k, Value: id[k]}
		}
		if r := o.pol.Match(domain, entries); r != nil && (best == nil || o.position[r] < o.position[best]) {
			best, bestEntries = r, entries
		}
	}
	return best, bestEntries
}

// checkBucketID says what is wrong with a BucketId, as checkShape in
// pkg/service does for a descriptor: its entries count, key and value
// sizes.
func checkBucketID(id map[string]string) error {
	if n := len(id); n == 0 || n > service.MaxEntries {
		return fmt.Errorf("bucket id of %d entries: want 1 to %d", n, service.MaxEntries)
	}
	for k, v := range id {
		if len(k) == 0 || len(k) > service.MaxKeyBytes {
			return fmt.Errorf("bucket id key of %d bytes: want 1 to %d", len(k), service.MaxKeyBytes)
		}
		if len(v) > service.MaxValueBytes {
			return fmt.Errorf("bucket id value of %d bytes for key %q (at most %d)", len(v), k, service.MaxValueBytes)
		}
	}
	return nil
}

// canonical is a BucketId's identity on a stream: its entries sorted by
// key, each length-prefixed, so that two maps are one bucket exactly when
// they are equal. Up to 8 keys it allocates nothing but dst's growth.
func canonical(dst []byte, id map[string]string) []byte {
	var small [8]string
	keys := small[:0]
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := id[k]
		dst = strconv.AppendInt(dst, int64(len(k)), 10)
		dst = append(dst, ':')
		dst = append(dst, k...)
		dst = strconv.AppendInt(dst, int64(len(v)), 10)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	return dst
}
