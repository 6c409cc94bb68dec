package service

import (
	"context"
	"fmt"
	"math"
	"slices"
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
	quotas           int  // quota descriptors (desc.isQuota)
	quotaRefused     int  // of them, refused before the store
	id               requestID
	quotaID          requestID // the id of a second decision (quota.go)
	hasID            bool      // the request carried a non-empty id
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
	replaced bool         // another rule replaces its rule, or it is not_limited
	// quotaOver: a quota descriptor over the limit while another is not;
	// it is charged nothing and answers OVER_LIMIT for itself (quota.go).
	quotaOver bool
	refusal   string // why it was refused before the store, "" if not
	cost      int64  // asked of its bucket (a refusal's too, when it has one)
	keyStart  int
	keyEnd    int
}

func (sc *scratch) reset() {
	sc.entries, sc.keys, sc.descs, sc.verdicts = sc.entries[:0], sc.keys[:0], sc.descs[:0], sc.verdicts[:0]
	sc.enforced.reset()
	sc.shadow.reset()
	sc.refused, sc.hasID = false, false
	sc.quotas, sc.quotaRefused = 0, 0
}

func (b *batch) reset() {
	b.req.Items = b.req.Items[:0]
	b.req.ID = ""
	b.out, b.err = store.Outcome{}, nil
	b.local.reset()
}

// plan matches every descriptor of domain to its rule, drops the rules
// that others of the request replace, works out each cost (hits is the
// request's hits_addend) and builds each bucket key.
func (sc *scratch) plan(pol *policy.Policy, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32) {
	sc.reset()
	idKey := pol.RequestIDKey()
	for _, d := range descriptors {
		ds := desc{item: -1}
		if idKey != "" && len(d.Entries) == 1 && d.Entries[0].Key == idKey {
			// Hashed here, so that nothing keeps the client's bytes.
			sc.id, sc.hasID = hashRequestID(d.Entries[0].Value)
			ds.isID = true
		} else {
			ds.rule = pol.Match(domain, sc.entriesOf(d))
		}
		sc.descs = append(sc.descs, ds)
	}
	sc.dropReplaced()
	for i, d := range descriptors {
		ds := &sc.descs[i]
		switch {
		case ds.rule == nil || ds.rule.Unlimited:
			continue
		case ds.rule.Deny:
			ds.refusal = "rule " + ds.rule.Domain + "/" + ds.rule.Name + " allows no requests (capacity 0)"
		default:
			entries := sc.entriesOf(d)
			ds.cost, ds.refusal = costOf(d, hits, ds.rule, entries)
			if ds.refusal == "" {
				ds.keyStart = len(sc.keys)
				sc.keys = ds.rule.AppendKey(sc.keys, entries)
				ds.keyEnd = len(sc.keys)
				b := sc.batch(ds.rule)
				ds.item = len(b.req.Items)
				b.req.Items = append(b.req.Items, store.Item{Version: ds.rule.Version, Cost: ds.cost, Revision: pol.Revision()})
			}
		}
		switch {
		case ds.isQuota():
			sc.quotas++
			if ds.refusal != "" {
				sc.quotaRefused++
				ds.quotaOver = true
			}
		case ds.refusal != "" && !ds.rule.Shadow:
			sc.refused = true
		}
	}
	if sc.quotas > 0 && sc.quotaRefused == sc.quotas {
		sc.refused = true // every quota descriptor is refused: so is the request
	}
	// sc.keys no longer grows: the items' keys can now alias it.
	for _, ds := range sc.descs {
		if ds.item >= 0 {
			sc.batch(ds.rule).req.Items[ds.item].Key = unsafe.String(&sc.keys[ds.keyStart], ds.keyEnd-ds.keyStart)
		}
	}
}

// entriesOf copies a descriptor's entries into sc.entries.
func (sc *scratch) entriesOf(d *ratelimitv3.RateLimitDescriptor) []policy.Entry {
	sc.entries = sc.entries[:0]
	for _, e := range d.Entries {
		sc.entries = append(sc.entries, policy.Entry{Key: e.Key, Value: e.Value})
	}
	return sc.entries
}

// dropReplaced answers as if no rule matched the descriptors whose rule
// is not_limited, or whose limit name another matched rule of the request
// replaces (unlimited rules replace but are never replaced, as in
// envoyproxy/ratelimit). A replaced rule's own replaces still count.
func (sc *scratch) dropReplaced() {
	replacing := false
	for i := range sc.descs {
		if r := sc.descs[i].rule; r != nil && len(r.Replaces) > 0 {
			replacing = true
		}
	}
	for i := range sc.descs {
		ds := &sc.descs[i]
		r := ds.rule
		switch {
		case r == nil:
		case r.NotLimited:
			ds.replaced = true
		case replacing && !r.Unlimited && r.Limit.Name != "":
			for j := range sc.descs {
				if o := sc.descs[j].rule; o != nil && slices.Contains(o.Replaces, r.Limit.Name) {
					ds.replaced = true
					break
				}
			}
		}
	}
	for i := range sc.descs {
		if sc.descs[i].replaced {
			sc.descs[i].rule = nil
		}
	}
}

func (sc *scratch) batch(r *policy.Rule) *batch {
	if r.Shadow {
		return &sc.shadow
	}
	return &sc.enforced
}

// costOf is the descriptor's cost (docs/policy.md, "Cost"), or why it is
// refused.
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
	if sc.quotas > sc.quotaRefused && !sc.refused {
		sc.decideWithoutOverQuotas(ctx, st, now)
	}
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
