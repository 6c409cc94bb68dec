package rlqs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
)

const testPolicy = `
domains:
  edge:
    - name: per-user
      match: [{key: user}, {key: path, value: /api/*}]
      capacity: 100
      refill: 10/s
    - name: per-path-user
      match: [{key: path}, {key: user}]
      capacity: 7
      refill: 1/s
    - name: health
      match: [{key: path, value: /healthz}]
      unlimited: true
    - name: banned
      match: [{key: ip, value: 10.0.0.1}]
      capacity: 0
    - name: per-ip
      match: [{key: ip}]
      capacity: 50
      refill: 5/s
    - name: tokens
      match: [{key: team}]
      capacity: 100
      refill: 10/s
      charge: after_response
      max_debt: 30
    - name: costly
      match: [{key: plan}]
      capacity: 100
      refill: 10/s
      cost: 5
    - name: watched
      match: [{key: tenant}]
      capacity: 10
      refill: 1/s
      shadow: true
`

func tokenBucketOf(t testing.TB, a *action) *typev3.TokenBucket {
	t.Helper()
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		t.Fatalf("want a token bucket, got %v", a)
	}
	return tb
}

func blanketOf(a *action) (typev3.RateLimitStrategy_BlanketRule, bool) {
	s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return s.GetBlanketRule(), ok
}

// TestBucketIDMatchesAsADescriptor: a BucketId is matched as a descriptor
// with its entries in a rule's order, the earliest rule in file order
// winning; rules without a bucket get blanket rules.
func TestBucketIDMatchesAsADescriptor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    map[string]string
		rule  string // "" for a blanket rule
		allow bool
	}{
		{"first of two key orders", map[string]string{"path": "/api/x", "user": "a"}, "per-user", false},
		{"the other order when the first refuses", map[string]string{"path": "/web", "user": "a"}, "per-path-user", false},
		{"unlimited", map[string]string{"path": "/healthz"}, "", true},
		{"no rule", map[string]string{"nothing": "here"}, "", true},
		{"capacity 0", map[string]string{"ip": "10.0.0.1"}, "", false},
		{"shadow", map[string]string{"tenant": "t"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testPolicy, Options{})
			a := only(t, must(f.open().send(report("edge", tc.id, 0, 1))))
			if tc.rule == "" {
				b, ok := blanketOf(a)
				if !ok || (b == typev3.RateLimitStrategy_ALLOW_ALL) != tc.allow {
					t.Fatalf("want a blanket rule (allow %v), got %v", tc.allow, a)
				}
				return
			}
			tokenBucketOf(t, a)
			f.svc.mu.Lock()
			defer f.svc.mu.Unlock()
			if len(f.svc.buckets) != 1 {
				t.Fatalf("%d buckets", len(f.svc.buckets))
			}
			for _, sh := range f.svc.buckets {
				if sh.rule.Name != tc.rule {
					t.Fatalf("matched %s, want %s", sh.rule.Name, tc.rule)
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLeaseIsTakenFromTheBucket: the first assignment is the rule's whole
// rate for a lone stream, one fill of burst, a TTL of two reporting
// intervals, and what it lets Envoy spend is taken from the bucket at
// once; ShouldRateLimit on the same descriptor sees the same bucket.
func TestLeaseIsTakenFromTheBucket(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	c := f.open()
	a := only(t, must(c.send(report("edge", map[string]string{"user": "a", "path": "/api/x"}, 0, 1))))
	tb := tokenBucketOf(t, a)
	if tb.GetMaxTokens() != 10 || tb.GetTokensPerFill().GetValue() != 10 || tb.GetFillInterval().AsDuration() != time.Second {
		t.Fatalf("token bucket %v, want 10 tokens per 1s, 10 at most", tb)
	}
	if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != 2*time.Second {
		t.Fatalf("ttl %v", ttl)
	}
	// 10 of burst, and 10/s for 2.25 s ahead: 23 (rounded up).
	entries := []policy.Entry{{Key: "user", Value: "a"}, {Key: "path", Value: "/api/x"}}
	if got := f.balance("edge", "per-user", entries...); got != 100-33 {
		t.Fatalf("balance %d, want %d", got, 100-33)
	}

	// The same bucket through ShouldRateLimit.
	svc, err := service.New(service.Options{Policy: f.pol.Load, Store: f.store, Metrics: metrics.New(f.reg), Clock: f.clk})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 60, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}, {Key: "path", Value: "/api/x"}},
	}}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 7 {
		t.Fatalf("ShouldRateLimit after the lease: %v, %v (want 7 left)", resp, err)
	}

	// A second later the same assignment is refreshed, and only the
	// second of refill it now covers is paid.
	f.clk.Add(time.Second)
	a2 := only(t, must(c.send(report("", map[string]string{"path": "/api/x", "user": "a"}, 4, 0))))
	if a2 != a && !sameStrategy(a, a2) {
		t.Fatalf("refresh changed the assignment: %v, then %v", a, a2)
	}
	if got := f.balance("edge", "per-user", entries...); got != 7+10-10 {
		t.Fatalf("balance %d after a second's refresh, want 7", got)
	}
}

// TestRuleCost: Envoy's token bucket counts requests, so a rule's cost
// makes them dearer: 10/s at cost 5 is 2 requests a second, and a lease or
// a report of n requests is 5n tokens.
func TestRuleCost(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	c := f.open()
	plan := []policy.Entry{{Key: "plan", Value: "free"}}
	tb := tokenBucketOf(t, only(t, must(c.send(report("edge", map[string]string{"plan": "free"}, 0, 1)))))
	if tb.GetTokensPerFill().GetValue() != 2 || tb.GetMaxTokens() != 2 {
		t.Fatalf("token bucket %v, want 2 requests a second", tb)
	}
	// 2 of burst and 2/s for 2.25 s (5, rounded up): 7 requests, 35 tokens.
	if got := f.balance("edge", "costly", plan...); got != 100-35 {
		t.Fatalf("balance %d, want %d", got, 100-35)
	}
	// 10 allowed, 7 paid: 3 more requests charged, 15 tokens; and the
	// second of refill the lease now covers, 2 requests.
	f.clk.Add(time.Second)
	only(t, must(c.send(report("", map[string]string{"plan": "free"}, 10, 0))))
	if got := f.balance("edge", "costly", plan...); got != 65+10-15-10 {
		t.Fatalf("balance %d, want %d", got, 65+10-15-10)
	}
}

func sameStrategy(a, b *action) bool {
	x, y := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(), b.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	return x.GetMaxTokens() == y.GetMaxTokens() && x.GetTokensPerFill().GetValue() == y.GetTokensPerFill().GetValue()
}

// TestReportsBeyondTheLease: requests Envoy allowed that no lease paid
// (no_assignment_behavior ALLOW_ALL) are charged as reports: on a pre-paid
// rule down to zero, the rest forgiven; on a post-paid rule down to
// -max_debt. Denied requests are counted, never charged.
func TestReportsBeyondTheLease(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	c := f.open()
	ip := []policy.Entry{{Key: "ip", Value: "1.2.3.4"}}
	// 70 allowed before any assignment: 50 charged, 20 forgiven; then the
	// empty bucket leases nothing.
	a := only(t, must(c.send(report("edge", map[string]string{"ip": "1.2.3.4"}, 70, 1000))))
	if b, ok := blanketOf(a); !ok || b != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("an empty bucket: want DENY_ALL, got %v", a)
	}
	if got := f.balance("edge", "per-ip", ip...); got != 0 {
		t.Fatalf("pre-paid balance %d, want 0", got)
	}
	if got := testutil.ToFloat64(f.svc.m.forgiven.WithLabelValues("edge", "per-ip")); got != 20 {
		t.Fatalf("forgiven %v, want 20", got)
	}
	if got := testutil.ToFloat64(f.svc.m.reported.WithLabelValues("edge", "per-ip", "denied")); got != 1000 {
		t.Fatalf("denied counted %v", got)
	}

	team := []policy.Entry{{Key: "team", Value: "x"}}
	only(t, must(c.send(report("", map[string]string{"team": "x"}, 200, 0))))
	if got := f.balance("edge", "tokens", team...); got != -30 {
		t.Fatalf("post-paid balance %d, want -30 (max_debt)", got)
	}
	if got := testutil.ToFloat64(f.svc.m.forgiven.WithLabelValues("edge", "tokens")); got != 70 {
		t.Fatalf("forgiven %v, want 70", got)
	}
}

// TestSharesFollowDemand: two streams on one bucket share its rate by
// demand, never more than it together, the quiet one keeping its floor.
func TestSharesFollowDemand(t *testing.T) {
	f := newFixture(t, strings.Replace(testPolicy, "capacity: 100\n      refill: 10/s", "capacity: 100000\n      refill: 1000/s", 1), Options{})
	busy, quiet := f.open(), f.open()
	id := map[string]string{"user": "a", "path": "/api/x"}
	// k is the share in the last action the stream got: pushes come
	// before the answer to its report.
	k := func(c *conn, allowed, denied uint64) int64 {
		rs := must(c.send(report("edge", id, allowed, denied)))
		return int64(tokenBucketOf(t, only(t, rs[len(rs)-1:])).GetTokensPerFill().GetValue())
	}
	kb := k(busy, 0, 1)
	if kb != 1000 {
		t.Fatalf("a lone stream gets %d of 1000", kb)
	}
	// The newcomer's floor is made at once: the busy stream is sent its
	// smaller share first.
	kq := k(quiet, 0, 1)
	kb = int64(tokenBucketOf(t, only(t, busy.take())).GetTokensPerFill().GetValue())
	if kb+kq > 1000 || kq < 1000/8 {
		t.Fatalf("shares %d + %d, more than the rate", kb, kq)
	}
	for range 3 {
		f.clk.Add(time.Second)
		kb, kq = k(busy, uint64(kb), 5000), k(quiet, 1, 0)
		if kb+kq > 1000 {
			t.Fatalf("shares %d + %d, more than the rate", kb, kq)
		}
	}
	if kb < 800 || kq < 1000/8 {
		t.Fatalf("busy %d, quiet %d: want the busy stream most of 1000/s and the quiet its floor", kb, kq)
	}
}

// TestSilentAndIdle: a stream silent past the TTL is out of the shares;
// a bucket without requests for AbandonAfter is abandoned and forgotten.
func TestSilentAndIdle(t *testing.T) {
	f := newFixture(t, testPolicy, Options{AbandonAfter: 10 * time.Second})
	a, b := f.open(), f.open()
	id := map[string]string{"user": "a", "path": "/api/x"}
	ka := tokenBucketOf(t, only(t, must(a.send(report("edge", id, 0, 50))))).GetTokensPerFill().GetValue()
	if ka != 10 {
		t.Fatalf("a lone stream gets %d of 10", ka)
	}
	f.clk.Add(3 * time.Second)
	f.svc.Tick(f.clk.Now()) // a has been silent past 2.25 s
	kb := tokenBucketOf(t, only(t, must(b.send(report("edge", id, 0, 50))))).GetTokensPerFill().GetValue()
	if kb != 10 {
		t.Fatalf("with the other stream silent, a stream gets %d of 10", kb)
	}
	f.clk.Add(11 * time.Second)
	f.svc.Tick(f.clk.Now())
	for _, c := range []*conn{a, b} {
		if act := only(t, c.take()); act.GetAbandonAction() == nil {
			t.Fatalf("want an abandon, got %v", act)
		}
	}
	f.svc.mu.Lock()
	defer f.svc.mu.Unlock()
	if len(f.svc.buckets) != 0 || len(a.st.subs) != 0 {
		t.Fatalf("abandoned buckets remembered: %d, %d", len(f.svc.buckets), len(a.st.subs))
	}
}

// TestPolicyChangeReachesEveryStream: a new policy sends every open
// stream its new assignments at once, on the next tick.
func TestPolicyChangeReachesEveryStream(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	a, b := f.open(), f.open()
	id := map[string]string{"ip": "9.9.9.9"}
	for _, c := range []*conn{a, b} {
		tokenBucketOf(t, only(t, must(c.send(report("edge", id, 0, 1)))))
	}
	tokenBucketOf(t, only(t, a.take())) // its share, made room in for b
	f.load(strings.Replace(testPolicy, "capacity: 50\n      refill: 5/s", "capacity: 0", 1))
	f.svc.Tick(f.clk.Now())
	for _, c := range []*conn{a, b} {
		if r, ok := blanketOf(only(t, c.take())); !ok || r != typev3.RateLimitStrategy_DENY_ALL {
			t.Fatal("the rule's capacity 0 did not reach a stream")
		}
	}
}

// TestLimitsAndBadReports: each refusal ends the stream with a clear
// error and subscribes nothing.
func TestLimitsAndBadReports(t *testing.T) {
	f := newFixture(t, testPolicy, Options{MaxStreams: 1, MaxBucketsPerStream: 2})
	c := f.open()
	if _, err := f.svc.open(context.Background(), nil); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--rlqs-max-streams") {
		t.Fatalf("second stream: %v", err)
	}
	many := report("edge", map[string]string{"ip": "1"}, 0, 1)
	for _, ip := range []string{"2", "3"} {
		many.BucketQuotaUsages = append(many.BucketQuotaUsages, report("", map[string]string{"ip": ip}, 0, 1).BucketQuotaUsages...)
	}
	for _, tc := range []struct {
		name string
		msg  *rlqsv3.RateLimitQuotaUsageReports
		code codes.Code
		want string
	}{
		{"no domain", report("", map[string]string{"ip": "1"}, 0, 1), codes.InvalidArgument, "no domain"},
		{"empty bucket id", report("edge", map[string]string{}, 0, 1), codes.InvalidArgument, "bucket id of 0 entries"},
		{"long value", report("edge", map[string]string{"ip": strings.Repeat("x", service.MaxValueBytes+1)}, 0, 1), codes.InvalidArgument, "at most 4096"},
		{"too many buckets", many, codes.ResourceExhausted, "--rlqs-max-buckets-per-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.send(tc.msg)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v containing %q", err, tc.code, tc.want)
			}
			if len(c.st.subs) != 0 {
				t.Fatal("a refused report subscribed")
			}
		})
	}
	if _, err := c.send(report("edge", map[string]string{"ip": "1"}, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.send(report("other", map[string]string{"ip": "1"}, 0, 1)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a stream per domain") {
		t.Fatalf("domain swap: %v", err)
	}
}

// TestView: /debug/rlqs counts the buckets, subscriptions and token
// buckets of each rule, and what they lease of its rate.
func TestView(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	a, b := f.open(), f.open()
	for _, c := range []*conn{a, b} {
		for _, ip := range []string{"1.1.1.1", "2.2.2.2"} {
			must(c.send(report("edge", map[string]string{"ip": ip}, 0, 1)))
		}
	}
	v := f.svc.View(f.clk.Now())
	if v.Streams != 2 || len(v.Rules) != 1 {
		t.Fatalf("view %+v", v)
	}
	r := v.Rules[0]
	if r.Rule != "per-ip" || r.Buckets != 2 || r.Subscriptions != 4 || r.TokenBuckets != 4 || r.PerFill != 5 || r.Leased > 2*5 || r.Leased < 4 {
		t.Fatalf("rule view %+v", r)
	}
	f.clk.Add(3 * time.Second) // every assignment expired
	if r := f.svc.View(f.clk.Now()).Rules[0]; r.TokenBuckets != 0 || r.Leased != 0 {
		t.Fatalf("expired assignments shown: %+v", r)
	}
}

// TestConcurrentStreams (run with -race): streams reporting overlapping
// buckets at once, each message decided Concurrency buckets at a time,
// while ticks and policy changes push to them, neither race nor wait on
// each other.
func TestConcurrentStreams(t *testing.T) {
	f := newFixture(t, testPolicy, Options{Concurrency: 4})
	conns := make([]*conn, 4)
	for i := range conns {
		conns[i] = f.open()
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			for n := range 20 {
				msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
				for u := range 50 {
					msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, report("", map[string]string{"ip": fmt.Sprint((u + i*10) % 60)}, uint64(n%3), 1).BucketQuotaUsages...)
				}
				if _, err := c.send(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for n := range 20 {
			f.clk.Add(100 * time.Millisecond)
			if n == 10 {
				f.load(strings.Replace(testPolicy, "capacity: 50\n      refill: 5/s", "capacity: 60\n      refill: 6/s", 1))
			}
			f.svc.Tick(f.clk.Now())
		}
	})
	wg.Wait()
	v := f.svc.View(f.clk.Now())
	if v.Streams != 4 || len(v.Rules) != 1 || v.Rules[0].Buckets != 60 || v.Rules[0].PerFill != 6 {
		t.Fatalf("view after the storm: %+v", v)
	}
	for _, r := range v.Rules {
		if r.Leased > int64(r.Buckets)*r.PerFill {
			t.Fatalf("leased %d per fill over %d buckets of %d", r.Leased, r.Buckets, r.PerFill)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	for _, opts := range []Options{
		{},
		{Policy: f.pol.Load, Store: f.store, Registerer: f.reg, ReportingInterval: 2 * time.Hour},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) made a service", opts)
		}
	}
}
