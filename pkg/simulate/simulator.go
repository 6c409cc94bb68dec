package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// DefaultMaxBuckets is the memory store's bucket cap when Options leave it
// zero: the same as tokengate serve's --max-buckets.
const DefaultMaxBuckets = 1_000_000

// Options configure a Simulator.
type Options struct {
	// MaxBuckets caps the memory store's buckets [DefaultMaxBuckets]. Past
	// it the store evicts as it does in service, choosing among sampled
	// buckets at random, so a trace of more distinct buckets than this is
	// no longer exactly repeatable.
	MaxBuckets int
	// CountBuckets counts decisions per bucket, for Hottest.
	CountBuckets bool
	// Follow are buckets (Hottest of an earlier run of the same policy
	// and trace) whose tokens are recorded second by second in
	// Result.Buckets.
	Follow []*Bucket
}

// Simulator decides requests through tokengate's decision path, the
// service on a memory store, on a clock that only the requests move. It is
// not safe for concurrent use: a simulation is one request after another.
type Simulator struct {
	clk       *clock.Fake
	svc       *service.Service
	rec       *recorder
	metrics   *metrics.Metrics // the service's own counts
	byRule    map[*policy.Rule]*RuleResult
	byVersion map[*bucket.Version]*policy.Rule
	result    Result
	// With CountBuckets: decisions per bucket, by key number.
	counts []int64
	// Scratch for count: a descriptor's entries and bucket key.
	entryBuf []policy.Entry
	key      []byte
}

// New returns a Simulator of pol with fresh buckets, at instant 0. It
// activates pol's versions (policy.Policy.Activate).
func New(pol *policy.Policy, opts Options) (*Simulator, error) {
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = DefaultMaxBuckets
	}
	pol.Activate()
	s := &Simulator{
		clk:    new(clock.Fake),
		byRule: map[*policy.Rule]*RuleResult{}, byVersion: map[*bucket.Version]*policy.Rule{},
		result: Result{Policy: pol.Name()}, metrics: metrics.New(prometheus.NewRegistry()),
	}
	s.rec = &recorder{st: memory.New(memory.Options{MaxBuckets: opts.MaxBuckets, Clock: s.clk})}
	switch {
	case len(opts.Follow) > 0:
		s.rec.keys = make(map[string]int32, len(opts.Follow))
		for i, b := range opts.Follow {
			s.rec.keys[b.key] = int32(i)
			s.result.Buckets = append(s.result.Buckets, &Bucket{Domain: b.Domain, Rule: b.Rule, Capacity: b.Capacity, MaxDebt: b.MaxDebt, key: b.key})
		}
	case opts.CountBuckets:
		s.rec.keys, s.rec.grow = map[string]int32{}, true
	}
	order := 0
	for _, d := range pol.Domains() {
		for _, r := range pol.Rules(d) {
			rr := &RuleResult{Domain: d, Rule: r.Name, Shadow: r.Shadow, Charge: r.Charge, Unlimited: r.Unlimited, FirstDry: -1, order: order}
			s.byRule[r] = rr
			order++
			if !r.Unlimited {
				s.byVersion[r.Version] = r
			}
			for _, b := range r.Bands {
				s.byVersion[b.Version] = r
			}
			if r.Version != nil { // not a not_limited or capacity 0 rule
				rr.Lowest = r.Version.Params.Capacity()
			}
		}
	}
	svc, err := service.New(service.Options{
		Policy: func() *policy.Policy { return pol }, Store: s.rec, StoreName: "memory",
		Metrics: s.metrics, Clock: s.clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	s.svc = svc
	return s, nil
}

// Decide decides req at its instant and counts the answer. The clock only
// moves forward: a request before the last one is decided at the last
// one's instant. A request the service refuses outright (InvalidArgument:
// an empty domain, too many descriptors or entries) is an error, the
// service's reason, and nothing is counted.
func (s *Simulator) Decide(ctx context.Context, req *Request) error {
	at := max(req.At, s.clk.Now())
	s.clk.Set(at)
	s.rec.reset()
	d, err := s.svc.Decide(ctx, req.Domain, req.Descriptors, 0)
	if err != nil {
		return errors.New(status.Convert(err).Message())
	}
	s.count(at, req, d)
	return nil
}

// count tallies one decision per descriptor. The recorder holds the
// store's answer item by item; the service put one item in its batch per
// descriptor of a limited rule, in descriptor order, except for a
// descriptor it refused before asking the store (a cost above max_cost, an
// over-long value). So walking the descriptors in order, a descriptor
// whose bucket key is that of the next item of its batch is that item;
// any other was refused. (Two descriptors with one key are one bucket:
// which of them is which item changes nothing.)
func (s *Simulator) count(at int64, req *Request, d *service.Decision) {
	res := &s.result
	res.Requests++
	res.End = at
	overall := d.Response.OverallCode == rlsv3.RateLimitResponse_OK
	if !overall {
		res.OverLimit++
	}
	// The enforced call charged its gates when the store allowed them,
	// unless a descriptor was refused before the store (then it asked
	// for nothing but the reports): an OVER_LIMIT answer alone does not
	// say, since a report or an every_hit hit left in debt answers
	// OVER_LIMIT on a request whose other descriptors were charged.
	charged := overall || !refusedBefore(d)
	var calls [2]*storeCall // enforced, shadow
	for i := range s.rec.calls {
		c := &s.rec.calls[i]
		if r := s.rule(c); r != nil && r.Shadow {
			calls[1] = c
		} else {
			calls[0] = c
		}
	}
	var next [2]int
	for i, r := range d.Rules {
		if r == nil {
			if d.Verdicts[i].Result != service.ResultRequestID {
				res.NoRule++
			}
			continue
		}
		rr := s.byRule[r]
		if r.Unlimited {
			rr.add(at, outcomeAllowed)
			continue
		}
		k := 0
		if r.Shadow {
			k = 1
		}
		c := calls[k]
		if r.HasBucket() {
			s.key = r.AppendBandKey(s.key[:0], s.entries(req.Descriptors[i]), 0, s.clk.Now())
		}
		// A rule of several limits has an item per band, the first band's
		// first; the verdict says which band decided.
		bands := len(r.Bands)
		if c == nil || next[k]+max(bands, 1) > len(c.items) || c.items[next[k]].version != r.Version || !c.keyIs(next[k], s.key) {
			rr.add(at, outcomeRefused)
			continue
		}
		first := next[k]
		it := &c.items[first+d.Verdicts[i].Band]
		next[k] += bands
		if d.Verdicts[i].Reason != "" {
			// Refused (a shadow rule's too): a cost above max_cost has
			// its bucket checked at cost 0, an allowed item.
			rr.add(at, outcomeRefused)
			continue
		}
		o := classify(it, c.out.Allowed && (r.Shadow || charged))
		rr.add(at, o)
		rr.tally(it, o, &d.Verdicts[i], c.out.Replayed)
		if rr.FirstDry < 0 && it.result.Remaining < dryBelow(r) {
			rr.FirstDry = at
		}
		for j := range bands { // each limit is a bucket of its own
			s.bucket(at, &c.items[first+j], r, j, req, i, c.out.Replayed)
		}
	}
}

// entries are d's entries as the policy matches them.
func (s *Simulator) entries(d *ratelimitv3.RateLimitDescriptor) []policy.Entry {
	s.entryBuf = s.entryBuf[:0]
	for _, e := range d.Entries {
		s.entryBuf = append(s.entryBuf, policy.Entry{Key: e.Key, Value: e.Value})
	}
	return s.entryBuf
}

// rule is the rule of a store call's first item: every item of a call is
// of a rule of the policy, and the items of one call are all shadow or all
// enforced.
func (s *Simulator) rule(c *storeCall) *policy.Rule {
	if len(c.items) == 0 {
		return nil
	}
	return s.byVersion[c.items[0].version]
}

// refusedBefore says whether an enforced descriptor of d was refused, so
// that the service asked its store for nothing but the reports.
func refusedBefore(d *service.Decision) bool {
	for i := range d.Verdicts {
		if v := &d.Verdicts[i]; v.Result == service.ResultRefused && !v.Rule.Shadow {
			return true
		}
	}
	return false
}

// classify is one item's outcome; whole says whether its whole request
// (its batch, and for an enforced rule the answer) was allowed. A report
// (an every_hit rule's hits too) is charged whatever the rest of its
// request says, so it is never blocked: its own answer says whether it
// left its bucket in debt.
func classify(it *decided, whole bool) outcome {
	switch {
	case it.result.Never:
		return outcomeRefused
	case !it.result.Allowed:
		return outcomeRejected
	case !whole && it.charge != store.Report:
		return outcomeBlocked
	case it.cost < 0:
		return outcomeRefund
	}
	return outcomeAllowed
}

// dryBelow is the whole tokens a bucket of r needs to let a request of
// the rule through: its cost, or on a post-paid rule what a check needs,
// a token or its reserve.
func dryBelow(r *policy.Rule) int64 {
	if r.Charge == policy.AfterResponse {
		return max(r.Reserve, 1)
	}
	return r.Cost
}

// bucket counts a decision of a bucket, the item of limit band of rule r
// for descriptor i, or records the balance of a followed one (unless
// replayed: the answer was an earlier one's).
func (s *Simulator) bucket(at int64, it *decided, r *policy.Rule, band int, req *Request, i int, replayed bool) {
	switch {
	case it.key < 0:
	case s.rec.grow:
		// The recorder numbered the keys of every item, some of which
		// (refused descriptors' items) are never counted here.
		for int(it.key) >= len(s.counts) {
			s.counts = append(s.counts, 0)
		}
		s.counts[it.key]++
	default:
		b := s.result.Buckets[it.key]
		b.Decisions++
		if b.Label == "" {
			b.Label = r.KeyString(s.entries(req.Descriptors[i])) // the bucket as explain writes it
			if len(r.Bands) > 1 {
				b.Label += fmt.Sprintf(" limits[%d]", band+1)
			}
		}
		if !replayed { // a replayed answer is not the bucket's now
			b.Tokens = addMin(b.Tokens, at, balance(&it.result))
		}
	}
}

// Hottest returns the n buckets with the most decisions (CountBuckets),
// most first, ties by key, to follow in another run.
func (s *Simulator) Hottest(n int) []*Bucket {
	ids := make([]int32, len(s.counts))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := cmp.Compare(s.counts[b], s.counts[a]); c != 0 {
			return c
		}
		return strings.Compare(s.rec.names[a], s.rec.names[b])
	})
	out := make([]*Bucket, 0, min(n, len(ids)))
	for _, id := range ids[:min(n, len(ids))] {
		v := s.rec.versions[id]
		r := s.byVersion[v]
		b := &Bucket{Domain: r.Domain, Rule: r.Name, Capacity: v.Params.Capacity(), Decisions: s.counts[id], key: s.rec.names[id]}
		if r.PostPaid() {
			b.MaxDebt = v.Params.MaxDebt()
		}
		out = append(out, b)
	}
	return out
}

// Result returns what the requests decided so far: the rules that decided
// at least one descriptor, by domain and then in file order.
func (s *Simulator) Result() *Result {
	res := s.result
	res.Rules = nil
	for _, rr := range s.byRule {
		if rr.decisions() > 0 {
			c := *rr
			c.Series = slices.Clone(rr.Series)
			res.Rules = append(res.Rules, &c)
		}
	}
	slices.SortFunc(res.Rules, func(a, b *RuleResult) int { return a.order - b.order })
	return &res
}
