package service

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// scratch is one request's working memory, reused through a sync.Pool so
// that the hot path does not allocate. Nothing in a response points into it.
type scratch struct {
	entries []policy.Entry
	keys    []byte // every bucket key of the request, back to back
	descs   []desc
	// verdicts are judge's, one per desc; nothing in one points into the
	// scratch. dec and rules are DecideFunc's Decision.
	verdicts []Verdict
	rules    []*policy.Rule
	dec      Decision

	enforced, shadow batch
	refused          bool // a descriptor was refused before the store
	id               requestID
	hasID            bool // the request carried a non-empty id
}

// batch is one store call: the enforced descriptors, or the shadow ones.
type batch struct {
	req     store.Request
	results []store.Result
	out     store.Outcome
	err     error
	local   fallback // the local budget's answer when err != nil
}

// desc is the plan for one descriptor.
type desc struct {
	rule     *policy.Rule // nil: no rule matched
	isID     bool         // the request-id descriptor
	item     int          // index in its batch, -1 when it has no bucket
	refusal  string       // why it was refused before the store, "" if not
	cost     int64        // asked of its bucket (a refusal's too, when it has one)
	keyStart int
	keyEnd   int
}

func (sc *scratch) reset() {
	sc.entries, sc.keys, sc.descs, sc.verdicts = sc.entries[:0], sc.keys[:0], sc.descs[:0], sc.verdicts[:0]
	sc.enforced.reset()
	sc.shadow.reset()
	sc.refused, sc.hasID = false, false
}

func (b *batch) reset() {
	b.req.Items = b.req.Items[:0]
	b.req.ID = ""
	b.out, b.err = store.Outcome{}, nil
	b.local.reset()
}

// plan matches every descriptor of domain to its rule, works out its cost
// (hits is the request's hits_addend) and builds its bucket key.
func (sc *scratch) plan(pol *policy.Policy, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32) {
	sc.reset()
	idKey := pol.RequestIDKey()
	for _, d := range descriptors {
		ds := desc{item: -1}
		if idKey != "" && len(d.Entries) == 1 && d.Entries[0].Key == idKey {
			// Hashed here, so that nothing keeps the client's bytes.
			sc.id, sc.hasID = hashRequestID(d.Entries[0].Value)
			ds.isID = true
			sc.descs = append(sc.descs, ds)
			continue
		}
		sc.entries = sc.entries[:0]
		for _, e := range d.Entries {
			sc.entries = append(sc.entries, policy.Entry{Key: e.Key, Value: e.Value})
		}
		ds.rule = pol.Match(domain, sc.entries)
		if ds.rule != nil && !ds.rule.Unlimited {
			ds.cost, ds.refusal = costOf(d, hits, ds.rule, sc.entries)
			if ds.refusal == "" {
				ds.keyStart = len(sc.keys)
				sc.keys = ds.rule.AppendKey(sc.keys, sc.entries)
				ds.keyEnd = len(sc.keys)
				b := sc.batch(ds.rule)
				ds.item = len(b.req.Items)
				b.req.Items = append(b.req.Items, store.Item{Version: ds.rule.Version, Cost: ds.cost, Revision: pol.Revision()})
			} else if !ds.rule.Shadow {
				sc.refused = true
			}
		}
		sc.descs = append(sc.descs, ds)
	}
	// sc.keys no longer grows: the items' keys can now alias it.
	for _, ds := range sc.descs {
		if ds.item >= 0 {
			sc.batch(ds.rule).req.Items[ds.item].Key = unsafe.String(&sc.keys[ds.keyStart], ds.keyEnd-ds.keyStart)
		}
	}
}

func (sc *scratch) batch(r *policy.Rule) *batch {
	if r.Shadow {
		return &sc.shadow
	}
	return &sc.enforced
}

// costOf is the descriptor's cost (DESIGN.md §3.2), or why it is refused.
func costOf(d *ratelimitv3.RateLimitDescriptor, hitsAddend uint32, r *policy.Rule, entries []policy.Entry) (int64, string) {
	for _, e := range entries {
		if len(e.Value) > MaxValueBytes {
			return 0, fmt.Sprintf("descriptor value of %d bytes for key %q (at most %d)", len(e.Value), e.Key, MaxValueBytes)
		}
	}
	c := uint64(r.Cost)
	switch {
	case d.HitsAddend != nil:
		c = d.HitsAddend.Value
	case hitsAddend != 0:
		c = uint64(hitsAddend)
	}
	if d.IsNegativeHits {
		// A refund beyond capacity fills the bucket, no more.
		return -int64(min(c, uint64(r.Version.Params.Capacity()))), ""
	}
	if c > uint64(r.MaxCost) {
		return int64(min(c, math.MaxInt64)), fmt.Sprintf("cost %d exceeds max_cost %d of rule %s/%s", c, r.MaxCost, r.Domain, r.Name)
	}
	return int64(c), ""
}

// decide runs the store calls: the enforced descriptors together (check
// only when one was refused already, so nothing is charged), then the
// shadow ones on their own, without the request id (a replay of the id
// answers the enforced call).
func (sc *scratch) decide(ctx context.Context, st, local store.Store, now int64) {
	if sc.refused {
		for i := range sc.enforced.req.Items {
			sc.enforced.req.Items[i].Cost = 0
		}
	}
	if sc.hasID {
		sc.enforced.req.ID = sc.id.alias()
	}
	sc.enforced.run(ctx, st, now)
	sc.shadow.run(ctx, st, now)
	if sc.enforced.err != nil && local != nil {
		sc.decideLocal(ctx, local)
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
}
