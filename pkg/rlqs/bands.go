package rlqs

// A rule's bands (policy.Band) in the store: every lease, refresh and
// overage of a bucket is one store decision with one item per band, of one
// cost, all or nothing, under each band's key and version at the instant
// decided (a calendar budget's key names its period). A lease on a rule
// with a budget ends with the period, so that each period's bucket pays
// only for what Envoy spends within it.

import (
	"context"
	"math"
	"time"
	"unsafe"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// decide asks the store for one item of each of sh's bands (sh.mu),
// requests requests of the rule's cost on each, all or nothing, and says
// whether it was allowed; sh.results[:len(rule.Bands)] are the bands'
// answers. No requests is no call.
func (s *Service) decide(ctx context.Context, sh *shared, charge store.Charge, requests, now int64) (bool, error) {
	if requests == 0 {
		return true, nil
	}
	cost := requests * sh.fill.unit
	if requests > math.MaxInt64/sh.fill.unit {
		cost = math.MaxInt64
	}
	sh.req.Now = now
	sh.req.Items = sh.req.Items[:0]
	sh.keys = sh.keys[:0]
	var ends [policy.MaxBands]int
	for j := range sh.rule.Bands {
		sh.keys = sh.rule.AppendBandKey(sh.keys, sh.entries, j, now)
		ends[j] = len(sh.keys)
	}
	start := 0
	for j := range sh.rule.Bands {
		key := unsafe.String(&sh.keys[start], ends[j]-start) // sh.keys is not appended to again before Decide returns
		start = ends[j]
		sh.req.Items = append(sh.req.Items, store.Item{Key: key, Version: sh.rule.Bands[j].Version, Cost: cost, Charge: charge, Revision: sh.revision})
	}
	out, err := s.opts.Store.Decide(ctx, &sh.req, sh.results[:])
	return out.Allowed, err
}

// remaining is the fewest whole requests' tokens a band of sh holds
// after the last decide (sh.mu): what a lease can still take from all.
func (sh *shared) remaining() int64 {
	least := sh.results[0].Remaining
	for _, r := range sh.results[1:len(sh.rule.Bands)] {
		least = min(least, r.Remaining)
	}
	return least
}

// forgiven is the most a band of sh forgave of the last report (sh.mu).
func (sh *shared) forgiven() int64 {
	most := int64(0)
	for _, r := range sh.results[:len(sh.rule.Bands)] {
		most = max(most, r.Forgiven)
	}
	return most
}

// leaseTTL is how long a lease of sh made now may live (sh.mu): the TTL,
// or less on a rule with a calendar budget, whose current period's bucket
// pays the lease: a lease Envoy may spend until its arrival (by now +
// slack) plus its TTL must end with the period, so that no period pays
// for what Envoy spends in the next. Whole seconds, as Envoy reads them;
// 0 when under a second of the period is left (DENY_ALL until the next
// report after it ends, which the next period's bucket pays).
func (s *Service) leaseTTL(sh *shared, now int64) int64 {
	ttl := s.ttl
	for i := range sh.rule.Bands {
		if bud := sh.rule.Bands[i].Budget; bud != nil {
			_, end := bud.Bounds(now)
			left := end - now - int64(s.opts.DeliverySlack)
			ttl = min(ttl, max(0, left)/int64(time.Second)*int64(time.Second))
		}
	}
	return ttl
}
