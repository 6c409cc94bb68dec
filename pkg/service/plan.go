package service

import (
	"context"
	"fmt"
	"math"
	"slices"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// reqState is one request's working memory (its plan, keys, store calls
// and verdicts), reused through a sync.Pool so that the hot path does not
// allocate. Nothing in a response points into it.
type reqState struct {
	entries []policy.Entry
	keys    []byte // every bucket key of the request, back to back
	descs   []desc
	// verdicts are judge's, one per desc; nothing in one points into the
	// request state. dec and rules are DecideFunc's Decision.
	verdicts []Verdict
	rules    []*policy.Rule
	dec      Decision
	reason   string // respond's: Decision.Reason

	enforced, shadow batch
	refused          bool // a descriptor was refused before the store
	quotas           int  // quota descriptors (desc.isQuota)
	quotaRefused     int  // of them, refused before the store
	stopping         int  // descriptors of stop_when_over rules with items (stopcount.go)
	id               requestID
	quotaID          requestID      // the id of a second decision (quota.go)
	firstResults     []store.Result // the first decision's answers, before a second (quota.go)
	hasID            bool           // the request carried a non-empty id
	stop             stopState      // stop_when_over's probe and second decision (stopcount.go)
	// keyHasher names the bucket keys shown (metadata.go); nil in a
	// candidate's request state, which shows none.
	keyHasher *keyhash.Hasher
}

// batch is one store call: the enforced descriptors, or the shadow ones.
type batch struct {
	req     store.Request
	spans   []keySpan // each item's key in reqState.keys
	ends    []int64   // each item's period end, a calendar budget's; else 0
	results []store.Result
	out     store.Outcome
	err     error
	local   fallback // the local budget's answer when err != nil
}

// desc is the plan for one descriptor.
type desc struct {
	rule     *policy.Rule // nil: no rule matched
	isID     bool         // the request-id descriptor
	item     int          // index in its batch, -1 when it has no bucket (or is refused unchecked)
	replaced bool         // another rule of the request replaces its rule
	dropped  bool         // answered as no rule: replaced, or its rule is not_limited
	// quotaOver: a quota descriptor over the limit while another is not;
	// it is charged nothing and answers OVER_LIMIT for itself (quota.go).
	quotaOver bool
	// overCounted: a stop_when_over descriptor that did not fit, counted
	// all the same; it answers OVER_LIMIT (stopcount.go).
	overCounted bool
	refusal     string // why it was refused before the store, "" if not
	// unreserved: a check of a reserve rule that holds nothing (no
	// request id, or decided again without it: reserve.go).
	unreserved bool
	cost       int64 // asked of its bucket (a refusal's too, when it has one)
	// bands is how many items the descriptor has from item on, one per
	// band of its rule (bands.go); band is the one its verdict took.
	bands, band int
}

func (rs *reqState) reset() {
	rs.entries, rs.keys, rs.descs, rs.verdicts = rs.entries[:0], rs.keys[:0], rs.descs[:0], rs.verdicts[:0]
	rs.enforced.reset()
	rs.shadow.reset()
	rs.refused, rs.hasID = false, false
	rs.quotas, rs.quotaRefused, rs.stopping = 0, 0, 0
}

func (b *batch) reset() {
	b.req.Items, b.spans, b.ends = b.req.Items[:0], b.spans[:0], b.ends[:0]
	b.req.ID = ""
	b.out, b.err = store.Outcome{}, nil
	b.local.reset()
}

// plan matches every descriptor of domain to its rule, drops the rules
// that others of the request replace, works out each cost (hits is the
// request's hits_addend) and builds each bucket key (a calendar budget's
// for the period that holds now).
func (rs *reqState) plan(pol *policy.Policy, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32, now int64) {
	rs.reset()
	idKey := pol.RequestIDKey()
	for _, d := range descriptors {
		ds := desc{item: -1}
		if idKey != "" && len(d.Entries) == 1 && d.Entries[0].Key == idKey {
			// Hashed here, so that nothing keeps the client's bytes.
			rs.id, rs.hasID = hashRequestID(d.Entries[0].Value)
			ds.isID = true
		} else {
			ds.rule = pol.Match(domain, rs.entriesOf(d))
		}
		rs.descs = append(rs.descs, ds)
	}
	rs.dropReplaced()
	for i, d := range descriptors {
		ds := &rs.descs[i]
		switch {
		case ds.rule == nil || ds.rule.Unlimited:
			continue
		case ds.rule.Deny:
			ds.refusal = "rule " + ds.rule.Domain + "/" + ds.rule.Name + " allows no requests (capacity 0)"
		default:
			entries := rs.entriesOf(d)
			var charge store.Charge
			ds.cost, charge, ds.refusal = costOf(d, hits, ds.rule, entries)
			// A cost above max_cost is refused, and its bucket checked
			// at cost 0, so that its verdict says what the bucket holds.
			if cost := ds.cost; ds.refusal == "" || cost > ds.rule.MaxCost {
				if ds.refusal != "" {
					cost = 0
				}
				rs.addBands(ds, entries, store.Item{Cost: cost, Charge: charge, Revision: pol.Revision()}, now)
				if ds.rule.Charge == policy.StopWhenOver {
					rs.stopping++
				}
				if charge == store.Check && ds.rule.Reserves() && ds.refusal == "" {
					rs.reserve(ds, rs.batch(ds.rule))
				}
			}
		}
		switch {
		case ds.isQuota():
			rs.quotas++
			if ds.refusal != "" {
				rs.quotaRefused++
				ds.quotaOver = true
			}
		case ds.refusal != "" && !ds.rule.Shadow:
			rs.refused = true
		}
	}
	if rs.quotas > 0 && rs.quotaRefused == rs.quotas {
		rs.refused = true // every quota descriptor is refused: so is the request
	}
	// rs.keys no longer grows: the items' keys can now alias it.
	for _, b := range [2]*batch{&rs.enforced, &rs.shadow} {
		for i, sp := range b.spans {
			b.req.Items[i].Key = unsafe.String(&rs.keys[sp.start], sp.end-sp.start)
		}
	}
}

// entriesOf copies a descriptor's entries into rs.entries.
func (rs *reqState) entriesOf(d *ratelimitv3.RateLimitDescriptor) []policy.Entry {
	rs.entries = rs.entries[:0]
	for _, e := range d.Entries {
		rs.entries = append(rs.entries, policy.Entry{Key: e.Key, Value: e.Value})
	}
	return rs.entries
}

// dropReplaced answers as if no rule matched the descriptors whose rule
// is not_limited, or whose limit name another matched rule of the request
// replaces (unlimited rules replace but are never replaced, as in
// envoyproxy/ratelimit). A replaced rule's own replaces still count.
func (rs *reqState) dropReplaced() {
	replacing := false
	for i := range rs.descs {
		if r := rs.descs[i].rule; r != nil && len(r.Replaces) > 0 {
			replacing = true
		}
	}
	for i := range rs.descs {
		ds := &rs.descs[i]
		r := ds.rule
		switch {
		case r == nil:
		case r.NotLimited:
			ds.dropped = true
		case replacing && !r.Unlimited && r.Limit.Name != "":
			for j := range rs.descs {
				if o := rs.descs[j].rule; o != nil && slices.Contains(o.Replaces, r.Limit.Name) {
					ds.replaced, ds.dropped = true, true
					break
				}
			}
		}
	}
	for i := range rs.descs {
		if rs.descs[i].dropped {
			rs.descs[i].rule = nil
		}
	}
}

func (rs *reqState) batch(r *policy.Rule) *batch {
	if r.Shadow {
		return &rs.shadow
	}
	return &rs.enforced
}

// costOf is the descriptor's cost and how it is charged (docs/policy.md,
// "Cost", "Token budgets for LLM traffic" and "Charging every hit"), or why
// it is refused. On a post-paid rule a descriptor with its own hits_addend
// above 0 is a report of that much; any other, whatever the request's
// hits_addend, a check.
func costOf(d *ratelimitv3.RateLimitDescriptor, hitsAddend uint32, r *policy.Rule, entries []policy.Entry) (int64, store.Charge, string) {
	for _, e := range entries {
		if len(e.Value) > MaxValueBytes {
			return 0, store.Prepaid, fmt.Sprintf("descriptor value of %d bytes for key %q (at most %d)", len(e.Value), e.Key, MaxValueBytes)
		}
	}
	charge := itemCharge(r)
	c := uint64(r.Cost)
	switch {
	case r.Charge == policy.AfterResponse && d.GetHitsAddend().GetValue() == 0:
		return 0, store.Check, ""
	case r.Charge == policy.AfterResponse:
		c = d.HitsAddend.Value
	case d.HitsAddend != nil:
		c = d.HitsAddend.Value
	case hitsAddend != 0:
		c = uint64(hitsAddend)
	}
	if d.IsNegativeHits {
		// A refund beyond capacity fills the bucket, no more.
		return -int64(min(c, uint64(r.LargestCapacity()))), charge, ""
	}
	if r.Charge == policy.StopWhenOver && c == 0 {
		charge = store.Report // fits while the balance is not below zero (stopcount.go)
	}
	if !r.PostPaid() && c > uint64(r.MaxCost) {
		return int64(min(c, math.MaxInt64)), charge, fmt.Sprintf("cost %d exceeds max_cost %d of rule %s/%s", c, r.MaxCost, r.Domain, r.Name)
	}
	return int64(min(c, math.MaxInt64)), charge, ""
}

// itemCharge is how the store charges r's costs: as reports (never
// refused, down to -max_debt) on a rule charged after the response (its
// checks apart: costOf) or every hit, whose hits_addend 0 is then a report
// of 0, over the limit while the balance is below zero; else pre-paid
// (stop_when_over's costs too, first: stopcount.go).
func itemCharge(r *policy.Rule) store.Charge {
	if r.Charge == policy.AfterResponse || r.Charge == policy.EveryHit {
		return store.Report
	}
	return store.Prepaid
}

// decide runs the store calls: the enforced descriptors together (check
// only when one was refused already, so nothing is charged but the
// reports, usage already served), then the shadow ones on their own,
// without the request id (a replay of the id answers the enforced call);
// each, when refused, counts its stop_when_over descriptors that went over
// (stopcount.go).
func (rs *reqState) decide(ctx context.Context, st, local store.Store, now int64) {
	if rs.refused {
		uncharged(rs.enforced.req.Items)
	}
	if rs.hasID {
		rs.enforced.req.ID = rs.id.alias()
	}
	rs.runStopping(ctx, st, now, &rs.enforced)
	if rs.quotas > rs.quotaRefused && !rs.refused && !rs.stop.probed {
		rs.decideWithoutOverQuotas(ctx, st, now)
	}
	rs.countOver(ctx, st, now, &rs.enforced)
	rs.runStopping(ctx, st, now, &rs.shadow)
	rs.countOver(ctx, st, now, &rs.shadow)
	if rs.enforced.err != nil && local != nil {
		rs.decideLocal(ctx, local)
	}
}

// uncharged makes every item but the reports cost nothing, and hold
// nothing.
func uncharged(items []store.Item) {
	for i := range items {
		if items[i].Charge != store.Report {
			items[i].Cost, items[i].Reserve, items[i].ReserveTTL = 0, 0, 0
		}
	}
}

func (b *batch) run(ctx context.Context, st store.Store, now int64) {
	n := len(b.req.Items)
	if n == 0 {
		return
	}
	b.req.Now = now
	if cap(b.results) < n {
		b.results = make([]store.Result, n)
	}
	b.results = b.results[:n]
	b.out, b.err = st.Decide(ctx, &b.req, b.results)
	if b.err == nil {
		untilPeriodEnds(b.ends, b.results, now)
	}
}
