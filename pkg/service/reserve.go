package service

// Reservations (a post-paid rule's reserve, store.go "Reservations"): a
// check of a reserve rule holds reserve tokens for the request's id, and
// the report with the same id settles them. The store finds the
// reservation by the id, so only a check that carries one reserves.
//
// A check without a request id (the policy's request_id_key descriptor
// missing from the request) is decided as a plain check of a post-paid
// rule: admitted while a token is left, holding nothing, and counted in
// tokengate_unreserved_checks_total. Refusing it would turn a missing
// Envoy action into an outage of the route; holding tokens that no report
// could ever settle would take reserve tokens from the budget for
// reserve_ttl per request. A check decided a second time for quota
// descriptors (quota.go) holds nothing either: that decision is under an
// id derived from the request's, which its report does not carry.

import "github.com/tokengate/tokengate/pkg/store"

// reserve makes it, the check of descriptor ds on a reserve rule, hold
// the rule's reserve when the request has an id.
func (rs *reqState) reserve(ds *desc, it *store.Item) {
	if !rs.hasID {
		ds.unreserved = true
		return
	}
	it.Reserve, it.ReserveTTL = ds.rule.Reserve, int64(ds.rule.ReserveTTL)
}

// unreserve makes the enforced checks hold nothing, for a decision whose
// id is not the request's (quota.go).
func (rs *reqState) unreserve() {
	for i := range rs.descs {
		ds := &rs.descs[i]
		if ds.item < 0 || ds.rule.Shadow {
			continue
		}
		if it := &rs.enforced.req.Items[ds.item]; it.Reserve > 0 {
			it.Reserve, it.ReserveTTL = 0, 0
			ds.unreserved = true
		}
	}
}
