package service

// Quota descriptors (a rule with quota: true, the reference's quota_mode)
// refuse a request only together: a request passes while one of its quota
// descriptors can be covered and none of its other descriptors is refused.
// The store decides all or nothing, so when it refuses a request only
// because of quota descriptors while another quota descriptor could be
// covered, the request is decided again with the uncovered ones at cost 0:
// they are charged nothing and answer OVER_LIMIT for themselves. Which
// ones is read from the first answer, so a repeat of a request id, which
// replays that answer, leaves out the same ones and replays the second
// answer too (under an id derived from the request's: nothing is charged
// twice). A bucket drained between the two calls makes the second refuse
// the request, never oversell. A quota descriptor refused before the store
// (capacity 0, a cost above max_cost) counts as over the limit. A report
// (a post-paid rule's usage) refuses nothing and is charged by the first
// call: the second charges it nothing and it keeps the first call's answer.

import (
	"context"
	"crypto/sha256"

	"github.com/tokengate/tokengate/pkg/store"
)

// isQuota reports whether ds is decided as a quota descriptor: its rule is
// a quota rule that the store decides (not shadow).
func (ds *desc) isQuota() bool {
	return ds.rule != nil && ds.rule.Quota && !ds.rule.Shadow && (ds.rule.HasBucket() || ds.rule.Deny)
}

// decideWithoutOverQuotas decides the enforced descriptors again without
// the quota descriptors the store could not cover, when they alone made it
// refuse the request and another quota descriptor could be covered.
func (rs *reqState) decideWithoutOverQuotas(ctx context.Context, st store.Store, now int64) {
	e := &rs.enforced
	if e.err != nil || e.out.Allowed || len(e.req.Items) == 0 {
		return
	}
	covered := 0
	for i := range rs.descs {
		ds := &rs.descs[i]
		if ds.item < 0 || ds.rule.Shadow || ds.refusal != "" || e.req.Items[ds.item].Charge == store.Report {
			continue // a refusal's bucket is only checked: it covers nothing; a report is charged once
		}
		switch allowed := ds.covered(e.results); {
		case !ds.isQuota() && !allowed:
			return // refused for a limit of its own
		case ds.isQuota() && allowed:
			covered++
		}
	}
	if covered == 0 {
		return
	}
	for i := range rs.descs {
		ds := &rs.descs[i]
		if ds.isQuota() && ds.item >= 0 && !ds.covered(e.results) {
			ds.quotaOver = true
			uncharged(ds.items(e))
		}
	}
	if rs.hasID {
		rs.quotaID = quotaRequestID(&rs.id)
		e.req.ID = rs.quotaID.alias()
	}
	rs.unreserve() // its report does not carry the derived id (reserve.go)
	rs.firstResults = append(rs.firstResults[:0], e.results...)
	for i := range e.req.Items {
		if e.req.Items[i].Charge == store.Report {
			e.req.Items[i].Cost = 0
		}
	}
	e.run(ctx, st, now)
	for i := range e.req.Items {
		if e.req.Items[i].Charge == store.Report {
			e.results[i] = rs.firstResults[i]
		}
	}
}

// quotaRequestID is the id of a request's second decision, derived from
// its id.
func quotaRequestID(id *requestID) requestID {
	const suffix = "quota"
	var b [len(id) + len(suffix)]byte
	copy(b[:], id[:])
	copy(b[len(id):], suffix)
	sum := sha256.Sum256(b[:])
	return requestID(sum[:16])
}
