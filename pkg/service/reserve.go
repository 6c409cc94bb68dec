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

// A rule of several limits (bands.go) reserves on every band: each band's
// item holds the reserve in its own bucket, all or nothing with the rest
// of the request, and the report settles each band's apart (store.go
// "Reservations" keys one by request id and bucket). Every band is
// charged the same costs, so each ends exactly where it would without
// the reservation: reserve tokens held while the response is served,
// the report charged its cost less them.

// reserve makes the check of descriptor ds on a reserve rule, its items
// in b, hold the rule's reserve on every band when the request has an id.
func (rs *reqState) reserve(ds *desc, b *batch) {
	if !rs.hasID {
		ds.unreserved = true
		return
	}
	for i := range ds.items(b) {
		it := &b.req.Items[ds.item+i]
		it.Reserve, it.ReserveTTL = ds.rule.Reserve, int64(ds.rule.ReserveTTL)
	}
}

// unreserve makes the enforced checks hold nothing, for a decision whose
// id is not the request's (quota.go).
func (rs *reqState) unreserve() {
	for i := range rs.descs {
		ds := &rs.descs[i]
		if ds.item < 0 || ds.rule.Shadow {
			continue
		}
		for j := range ds.items(&rs.enforced) {
			if it := &rs.enforced.req.Items[ds.item+j]; it.Reserve > 0 {
				it.Reserve, it.ReserveTTL = 0, 0
				ds.unreserved = true
			}
		}
	}
}
