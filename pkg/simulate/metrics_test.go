package simulate

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/metrics"
)

// randomDescriptors are what a random request's descriptors are drawn from:
// every rule of testPolicy, entries no rule matches, an over-long value.
var randomDescriptors = [][]string{
	{"user", "a"}, {"user", "b"}, {"path", "/x"}, {"tenant", "t"}, {"probe", "p"}, {"probe", "q"},
	{"health", "h"}, {"user", "a", "x", "1"}, {"nothing", "z"}, {"tenant", strings.Repeat("v", 4097)},
}

// TestCountsAgreeWithService: on random traces, the simulation's counts
// per rule, made from the store's answers item by item, are exactly what
// the service counts in tokengate_decisions_total: ok is allowed, blocked
// and refunds; over_limit is rejected; refused is refused; for a shadow
// rule, shadow_over_limit is rejected and refused (the service does not
// tell them apart: neither is answered). It checks the pairing of
// descriptors with store items against the service's own view of every
// descriptor.
func TestCountsAgreeWithService(t *testing.T) {
	agreeWithService(t, testPolicy, "edge", randomDescriptors, func(rt *rapid.T, ds []*ratelimitv3.RateLimitDescriptor) {
		hits := rapid.IntRange(-6, 14).Draw(rt, "hits")
		if rapid.Bool().Draw(rt, "withHits") {
			for _, d := range ds {
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(uint64(max(hits, -hits))), hits < 0
			}
		}
	})
}

// postPaidDescriptors are drawn for postPaidPolicy: every rule, the
// request id, entries no rule matches.
var postPaidDescriptors = [][]string{
	{"user", "u"}, {"user", "v"}, {"client", "c"}, {"path", "/a"}, {"team", "t"}, {"team", "s"}, {"org", "o"},
	{"request_id", "r1"}, {"request_id", "r2"}, {"nothing", "z"},
}

// TestPostPaidCountsAgreeWithService is TestCountsAgreeWithService on
// post-paid, every_hit and reserve rules, with request ids (checks and
// reports of one id, replays) and each descriptor's own hits (none, 0, a
// report up to beyond max_debt, a refund); the tokens the simulation
// counts as forgiven are those of tokengate_forgiven_tokens_total.
func TestPostPaidCountsAgreeWithService(t *testing.T) {
	agreeWithService(t, postPaidPolicy, "llm", postPaidDescriptors, func(rt *rapid.T, ds []*ratelimitv3.RateLimitDescriptor) {
		for _, d := range ds {
			switch rapid.IntRange(0, 3).Draw(rt, "hitsKind") {
			case 1:
				d.HitsAddend = wrapperspb.UInt64(0)
			case 2:
				d.HitsAddend = wrapperspb.UInt64(uint64(rapid.SampledFrom([]int{1, 300, 999, 1000, 1001, 2500, 200_000}).Draw(rt, "report")))
			case 3:
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(uint64(rapid.IntRange(1, 1200).Draw(rt, "refund"))), true
			}
		}
	})
}

// agreeWithService replays random requests of domain (or another) with
// descriptors drawn from pool, given hits by hits, through pol, and checks
// every rule's counts against the service's metrics.
func agreeWithService(t *testing.T, pol, domain string, pool [][]string, hits func(*rapid.T, []*ratelimitv3.RateLimitDescriptor)) {
	rapid.Check(t, func(rt *rapid.T) {
		pol := parsePolicy(t, "p.yaml", pol)
		s, err := New(pol, Options{})
		if err != nil {
			rt.Fatal(err)
		}
		var at int64
		for range rapid.IntRange(1, 200).Draw(rt, "requests") {
			at += rapid.SampledFrom([]int64{0, 0, 1, 1e8, 999_999_999, 1e9, 7e9}).Draw(rt, "step")
			req := &Request{At: at, Domain: rapid.SampledFrom([]string{domain, domain, domain, "other"}).Draw(rt, "domain")}
			for range rapid.IntRange(1, 4).Draw(rt, "descriptors") {
				kv := rapid.SampledFrom(pool).Draw(rt, "descriptor")
				d := &ratelimitv3.RateLimitDescriptor{}
				for i := 0; i < len(kv); i += 2 {
					d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
				}
				req.Descriptors = append(req.Descriptors, d)
			}
			hits(rt, req.Descriptors)
			if err := s.Decide(context.Background(), req); err != nil {
				rt.Fatal(err)
			}
		}
		res := s.Result()
		decided := map[string]*RuleResult{}
		for _, rr := range res.Rules {
			decided[rr.Rule] = rr
		}
		for _, r := range pol.Rules(domain) {
			rr := decided[r.Name]
			if rr == nil {
				rr = &RuleResult{Shadow: r.Shadow}
			}
			for result, want := range serviceCounts(rr) {
				if got := testutil.ToFloat64(s.metrics.Decisions.WithLabelValues(domain, r.Name, result)); int64(got) != want {
					rt.Fatalf("rule %s, %s: the service counted %v, the simulation %d (%+v)", r.Name, result, got, want, rr)
				}
			}
			if got := testutil.ToFloat64(s.metrics.Forgiven.WithLabelValues(domain, r.Name)); int64(got) != rr.Forgiven {
				rt.Fatalf("rule %s: the service forgave %v tokens, the simulation %d", r.Name, got, rr.Forgiven)
			}
		}
		noRule := testutil.ToFloat64(s.metrics.Decisions.WithLabelValues(domain, "", metrics.ResultNoRule)) +
			testutil.ToFloat64(s.metrics.Decisions.WithLabelValues("", "", metrics.ResultNoRule))
		if int64(noRule) != res.NoRule {
			rt.Fatalf("no rule: the service counted %v, the simulation %d", noRule, res.NoRule)
		}
	})
}

// serviceCounts are the results the service counts for a rule, from the
// simulation's counts.
func serviceCounts(rr *RuleResult) map[string]int64 {
	c := map[string]int64{
		metrics.ResultOK:              rr.Allowed + rr.Blocked + rr.Refunds,
		metrics.ResultOverLimit:       rr.Rejected,
		metrics.ResultRefused:         rr.Refused,
		metrics.ResultShadowOverLimit: 0,
	}
	if rr.Shadow {
		c[metrics.ResultShadowOverLimit] = rr.Rejected + rr.Refused
		c[metrics.ResultOverLimit], c[metrics.ResultRefused] = 0, 0
	}
	return c
}
