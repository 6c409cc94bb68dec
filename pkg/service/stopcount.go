package service

// charge: stop_when_over (envoyproxy/ratelimit's counting with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true). The reference reads every
// key's count first; when one would go over (count + hits > limit), it
// increments only the keys that go over, by their hits, and the others by
// 0; when none would, every key by its hits. So a descriptor that goes over
// is counted, the others of its request not, and a hits_addend 0 check
// after it is OVER_LIMIT.
//
// Here a request is decided pre-paid first, all or nothing, a cost of 0 of
// such a rule as a report of 0 (it charges nothing, and fits while the
// balance is not below zero, as a count not above the limit does). When
// the store refuses it, the descriptors of stop_when_over rules whose cost
// is above their balance before the request (their count would go over:
// the reference's test, on the first decision's balances) are decided again
// as reports of their cost, charged down to -max_debt (one window's
// requests_per_unit for the reference's files), and answer OVER_LIMIT;
// every other item of that second decision costs nothing (a report was
// charged by the first), and keeps the first decision's answer.
//
// A report of 0 refuses nothing in the store, so a request that holds one
// beside an item that would charge (a mixed request) is first probed: the
// same items at cost 0, charging nothing. When a stop_when_over descriptor
// does not fit in it, the probe stands as the first (refusing) decision, and
// only the second decision is made, with every report at its cost; else
// the request is decided as planned. So such a request takes two store
// calls, as the reference's GET and INCRBY take two round trips.
//
// Not atomic, as the reference's GET then INCRBY is not: between the first
// decision (or the probe) and the second, another request may change a
// balance. A descriptor found over is charged all the same, and answers
// OVER_LIMIT even if its balance came back meanwhile; one found fitting is
// not charged even if it no longer fits; a probe that found every
// descriptor fitting is followed by a pre-paid decision that may refuse
// after all (then counted as above). What is charged is only ever the
// costs of descriptors that did not fit, within max_debt: no oversell of
// what fits, where the reference's two steps let two concurrent requests
// both pass on the same count. A store failure in the second decision
// leaves the first answer standing, nothing counted.
//
// Replay: the probe and the first decision carry the request's id, the
// second an id derived from it, and which descriptors go over is read from
// the first answer, which a repeat replays: so a repeat replays the second
// decision too and nothing is counted twice.

import (
	"context"
	"crypto/sha256"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// stopState is the working memory of a stop_when_over request (reqState).
type stopState struct {
	items   []store.Item   // the probe's items
	first   []store.Result // the first decision's answers
	id      requestID      // the second decision's id
	probed  bool           // the batch's first answer is the probe's: nothing was charged
	overIdx []int          // items found over
}

// stops reports whether ds is a descriptor of a stop_when_over rule that
// the store decides in b.
func (rs *reqState) stops(ds *desc, b *batch) bool {
	return ds.item >= 0 && ds.refusal == "" && ds.rule.Charge == policy.StopWhenOver && rs.batch(ds.rule) == b
}

// runStopping runs b's first decision: a probe first when b is a mixed
// request (a stop_when_over cost of 0 beside a cost that charges), and the
// planned decision unless the probe found a stop_when_over descriptor over.
func (rs *reqState) runStopping(ctx context.Context, st store.Store, now int64, b *batch) {
	rs.stop.probed = false
	if rs.stopping == 0 || !rs.mixed(b) {
		b.run(ctx, st, now)
		return
	}
	planned := b.req.Items
	rs.stop.items = append(rs.stop.items[:0], planned...)
	for i := range rs.stop.items {
		rs.stop.items[i].Cost, rs.stop.items[i].Reserve, rs.stop.items[i].ReserveTTL = 0, 0, 0
	}
	b.req.Items = rs.stop.items
	b.run(ctx, st, now)
	b.req.Items = planned
	if b.err != nil || !rs.anyOver(b) {
		if b.err == nil {
			b.run(ctx, st, now)
		}
		return
	}
	rs.stop.probed = true
	b.out.Allowed = false
}

// mixed reports whether b holds a stop_when_over report of 0 and an item
// that charges.
func (rs *reqState) mixed(b *batch) bool {
	zero, charging := false, false
	for i := range rs.descs {
		ds := &rs.descs[i]
		if rs.stops(ds, b) && ds.cost == 0 {
			zero = true
		}
	}
	for _, it := range b.req.Items {
		charging = charging || it.Cost > 0
	}
	return zero && charging
}

// goesOver reports whether stop_when_over descriptor ds goes over on the
// balance b's first decision found, on any of its bands: a cost above it
// (a cost of 0 on a balance below zero).
func goesOver(ds *desc, b *batch) bool {
	for _, r := range ds.bandResults(b.results) {
		if r.Never || ds.cost > r.Remaining-r.Debt {
			return true
		}
	}
	return false
}

// anyOver reports whether a stop_when_over descriptor of b goes over.
func (rs *reqState) anyOver(b *batch) bool {
	for i := range rs.descs {
		if ds := &rs.descs[i]; rs.stops(ds, b) && goesOver(ds, b) {
			return true
		}
	}
	return false
}

// countOver decides again, as reports of their cost, the stop_when_over
// descriptors that went over in b's refused first decision (see the file's
// comment); every other item then costs nothing and keeps its first answer.
func (rs *reqState) countOver(ctx context.Context, st store.Store, now int64, b *batch) {
	if rs.stopping == 0 || b.err != nil || b.out.Allowed || len(b.req.Items) == 0 {
		return
	}
	rs.stop.overIdx = rs.stop.overIdx[:0]
	for i := range rs.descs {
		if ds := &rs.descs[i]; rs.stops(ds, b) && ds.cost > 0 && goesOver(ds, b) {
			rs.stop.overIdx = append(rs.stop.overIdx, i)
		}
	}
	if len(rs.stop.overIdx) == 0 {
		return // nothing to count: a cost of 0 over its balance has its answer
	}
	first, firstOut := append(rs.stop.first[:0], b.results...), b.out
	rs.stop.first = first
	if !rs.stop.probed {
		for i := range b.req.Items {
			if b.req.Items[i].Charge == store.Report {
				b.req.Items[i].Cost = 0 // charged by the first decision
			}
		}
	}
	uncharged(b.req.Items)
	for _, i := range rs.stop.overIdx {
		ds := &rs.descs[i]
		for j := range ds.items(b) { // every band, as every_hit charges them
			it := &ds.items(b)[j]
			it.Charge, it.Cost = store.Report, ds.cost
		}
		ds.overCounted = true
	}
	if b == &rs.enforced && rs.hasID {
		rs.stop.id = derivedRequestID(&rs.id, "over")
		b.req.ID = rs.stop.id.alias()
	}
	b.run(ctx, st, now)
	counted := b.err == nil
	for i := range b.results {
		if !counted || b.req.Items[i].Charge != store.Report || b.req.Items[i].Cost == 0 {
			b.results[i] = first[i]
		}
	}
	if !counted {
		for _, i := range rs.stop.overIdx {
			rs.descs[i].overCounted = false
		}
	}
	b.out, b.err = firstOut, nil
}

// derivedRequestID is the id of a request's further decision, derived
// from its id and what the decision is for.
func derivedRequestID(id *requestID, what string) requestID {
	var b [len(id) + 16]byte
	copy(b[:], id[:])
	n := copy(b[len(id):], what)
	sum := sha256.Sum256(b[:len(id)+n])
	return requestID(sum[:16])
}
