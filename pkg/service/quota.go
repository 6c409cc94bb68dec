package service

// Quota descriptors (a rule with quota: true, the reference's quota_mode)
// refuse a request only together: a request passes while one of its quota
// descriptors can be covered and none of its other descriptors is refused.
// The store decides all or nothing, so a request with quota descriptors is
// first checked at cost 0 (one store call more, without the request id):
// the quota descriptors whose bucket cannot cover their cost are then
// charged nothing and answer OVER_LIMIT for themselves, provided another
// quota descriptor can be covered; the request is decided as usual with the
// rest. When none can, nothing changes and the request is refused as any
// other. The check and the decision are two calls: a bucket another
// request drains between them makes the decision refuse the request, never
// oversell. A quota descriptor refused before the store (capacity 0, a
// cost above max_cost) counts as over the limit.

import (
	"context"

	"github.com/tokengate/tokengate/pkg/store"
)

// isQuota reports whether ds is decided as a quota descriptor: its rule is
// a quota rule that the store decides (not shadow).
func (ds *desc) isQuota() bool {
	return ds.rule != nil && ds.rule.Quota && !ds.rule.Shadow && (ds.rule.HasBucket() || ds.rule.Deny)
}

// checkQuotas marks the quota descriptors whose cost their bucket cannot
// cover now, and takes their cost out of the enforced call, when at least
// one quota descriptor can be covered. A failed check leaves the request
// to be decided as if its quota rules were ordinary ones.
func (sc *scratch) checkQuotas(ctx context.Context, st store.Store, now int64) {
	c, e := &sc.check, &sc.enforced
	c.reset()
	for _, it := range e.req.Items {
		it.Cost = 0
		c.req.Items = append(c.req.Items, it)
	}
	c.run(ctx, st, now)
	if c.err != nil {
		return
	}
	covered := 0
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.isQuota() && ds.item >= 0 && c.results[ds.item].Remaining >= e.req.Items[ds.item].Cost {
			covered++
		}
	}
	if covered == 0 {
		return
	}
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.isQuota() && ds.item >= 0 && c.results[ds.item].Remaining < e.req.Items[ds.item].Cost {
			ds.quotaOver = true
			e.req.Items[ds.item].Cost = 0
		}
	}
}
