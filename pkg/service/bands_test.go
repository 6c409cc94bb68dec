package service

import (
	"context"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/store/redis"
)

const bandsPolicy = `
request_id_key: request_id
domains:
  edge:
    - name: llm
      match: [{key: user_id}]
      limits:
        - {capacity: 10, refill: 10/m}
        - {capacity: 25, refill: 1/m}
    - name: tokens
      match: [{key: team}]
      charge: after_response
      limits:
        - {capacity: 100, refill: 100/m}
        - {capacity: 1000, refill: 1000/d}
    - name: hits
      match: [{key: org}]
      charge: every_hit
      limits:
        - {capacity: 10, refill: 10/m}
        - {capacity: 30, refill: 1/m}
    - name: held
      match: [{key: project}]
      charge: after_response
      reserve: 40
      limits:
        - {capacity: 100, refill: 100/m}
        - {capacity: 50, refill: 50/h}
`

func newBandsFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, bandsPolicy, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
}

// balance is what band i of rule's bucket for the descriptor entries holds
// now (a check at cost 0 charges nothing).
func (f *fixture) balance(t *testing.T, rule string, band int, kv ...string) int64 {
	t.Helper()
	return f.bandResult(t, rule, band, kv...).Remaining
}

// bandResult is the store's answer to a cost-0 look at band i of rule's
// bucket for the descriptor entries: its balance (Remaining) or debt.
func (f *fixture) bandResult(t *testing.T, rule string, band int, kv ...string) store.Result {
	t.Helper()
	r := f.svc.opts.Policy().Rule("edge", rule)
	var entries []policy.Entry
	for i := 0; i < len(kv); i += 2 {
		entries = append(entries, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	req := &store.Request{Now: f.clk.Now(), Items: []store.Item{{Key: string(r.AppendBandKey(nil, entries, band, f.clk.Now())), Version: r.Bands[band].Version}}}
	res := make([]store.Result, 1)
	if _, err := f.store.Decide(context.Background(), req, res); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestBandsDecideTogether: a descriptor is charged on every band or on
// none, and the band that refuses decides current_limit and retry-after;
// when all pass, the one with the fewest tokens left does.
func TestBandsDecideTogether(t *testing.T) {
	bandsDecideTogether(t, newBandsFixture(t))
}

// TestBandsDecideTogetherRedis: the same on a real redis-server, to which
// bands are ordinary buckets of one request.
func TestBandsDecideTogetherRedis(t *testing.T) {
	client := redisClient(t)
	bandsDecideTogether(t, newFixtureWith(t, bandsPolicy, func(clk *clock.Fake) store.Store {
		st, err := redis.New(redis.Options{Client: client, KeyPrefix: "bands:", Timeout: 5 * time.Second, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, nil))
}

func bandsDecideTogether(t *testing.T, f *fixture) {
	perMinute := func(n uint32) *rlsv3.RateLimitResponse_RateLimit {
		return &rlsv3.RateLimitResponse_RateLimit{Name: "llm", RequestsPerUnit: n, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	}
	for _, step := range []struct {
		at        time.Duration
		cost      uint32
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
		limit     *rlsv3.RateLimitResponse_RateLimit
		retry     string
		b0, b1    int64 // the bands' balances after
	}{
		{0, 4, ok, 6, perMinute(10), "", 6, 21},
		{0, 4, ok, 2, perMinute(10), "", 2, 17},
		// The first band refuses (2 < 4): 2 tokens at 10/m are 12 s away;
		// the second band, which could pay, is not charged.
		{0, 4, over, 2, perMinute(10), "12", 2, 17},
		{time.Minute, 10, ok, 0, perMinute(10), "", 0, 8},
		// Now the second band refuses (9 < 10: one token at 1/m), and the
		// first, full, is not charged.
		{2 * time.Minute, 10, over, 9, perMinute(1), "60", 10, 9},
	} {
		f.clk.Set(int64(step.at))
		r := f.call(t, step.cost, descr("user_id", "alice"))
		st := r.Statuses[0]
		if r.OverallCode != step.code || st.LimitRemaining != step.remaining || st.CurrentLimit.String() != step.limit.String() || header(r, HeaderRetryAfter) != step.retry {
			t.Fatalf("at %v cost %d: %v, remaining %d, limit %v, retry-after %q; want %v, %d, %v, %q",
				step.at, step.cost, r.OverallCode, st.LimitRemaining, st.CurrentLimit, header(r, HeaderRetryAfter), step.code, step.remaining, step.limit, step.retry)
		}
		if b0, b1 := f.balance(t, "llm", 0, "user_id", "alice"), f.balance(t, "llm", 1, "user_id", "alice"); b0 != step.b0 || b1 != step.b1 {
			t.Fatalf("at %v: bands hold %d and %d, want %d and %d", step.at, b0, b1, step.b0, step.b1)
		}
	}
}

// TestBandsPostPaid: a report charges every band; a check passes only
// while every band has a token.
func TestBandsPostPaid(t *testing.T) {
	f := newBandsFixture(t)
	r := f.call(t, 0, hits(descr("team", "a"), 150))
	// The first band goes to -50 (its own max_debt: 100), the second to 850.
	if r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("report: %v", r)
	}
	if b1 := f.balance(t, "tokens", 1, "team", "a"); b1 != 850 {
		t.Fatalf("the second band holds %d, want 850", b1)
	}
	// A check is refused until the first band is back at one token: 51
	// tokens at 100/m, 30.6 s.
	r = f.call(t, 0, descr("team", "a"))
	if r.OverallCode != over || header(r, HeaderRetryAfter) != "31" {
		t.Fatalf("check: %v, retry-after %q", r.OverallCode, header(r, HeaderRetryAfter))
	}
	f.clk.Set(int64(31 * time.Second))
	r = f.call(t, 0, descr("team", "a"))
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("check after the debt is repaid: %v", r)
	}
}

// TestBandsModel: random requests on a rule of random bands, through the
// service and the memory store, against a plain model on pkg/bucket: each
// band a bucket, a request charged on all of them or none.
func TestBandsModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, policy.MaxBands).Draw(rt, "bands")
		src := "domains:\n  edge:\n    - name: r\n      match: [{key: k}]\n      limits:\n"
		params := make([]bucket.Params, n)
		for i := range n {
			c := rapid.Int64Range(1, 30).Draw(rt, "capacity")
			tokens := rapid.Int64Range(1, 20).Draw(rt, "tokens")
			per := rapid.SampledFrom([]time.Duration{time.Second, time.Minute, 7 * time.Second}).Draw(rt, "per")
			rate, err := bucket.NewRate(tokens, per)
			if err != nil {
				rt.Fatal(err)
			}
			params[i], _ = bucket.NewParams(c, rate)
			src += "        - {capacity: " + strconv.FormatInt(c, 10) + ", refill: " + rate.String() + "}\n"
		}
		f := newFixtureWith(t, src, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
		states := make([]bucket.State, n)
		for i := range states {
			states[i] = params[i].Full(0)
		}
		capMin := params[0].Capacity()
		for _, p := range params {
			capMin = min(capMin, p.Capacity())
		}
		for range rapid.IntRange(1, 30).Draw(rt, "requests") {
			now := f.clk.Add(time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "wait")))
			cost := rapid.Int64Range(1, capMin).Draw(rt, "cost")
			// The model: every band covers the cost, or none is charged.
			next := make([]bucket.State, n)
			results := make([]bucket.Result, n)
			allowed := true
			for i := range n {
				next[i], results[i] = params[i].Decide(states[i], now, cost)
				allowed = allowed && results[i].Allowed
			}
			want := results[0]
			for i := range n {
				if allowed {
					states[i] = next[i]
					if results[i].Remaining < want.Remaining {
						want = results[i]
					}
				} else {
					states[i] = params[i].Refill(states[i], now)
					if !results[i].Allowed && (want.Allowed || results[i].RetryAfter > want.RetryAfter) {
						want = results[i]
					}
				}
			}
			r := f.call(t, uint32(cost), descr("k", "v"))
			wantCode := ok
			if !allowed {
				wantCode = over
			}
			if r.OverallCode != wantCode || int64(r.Statuses[0].LimitRemaining) != want.Remaining {
				rt.Fatalf("at %d cost %d: %v remaining %d, want %v remaining %d", now, cost, r.OverallCode, r.Statuses[0].LimitRemaining, wantCode, want.Remaining)
			}
			if !allowed {
				wantRetry := strconv.FormatInt(CeilSeconds(time.Duration(want.RetryAfter)), 10)
				if got := header(r, HeaderRetryAfter); got != wantRetry {
					rt.Fatalf("at %d cost %d: retry-after %q, want %q", now, cost, got, wantRetry)
				}
			}
		}
	})
}

const benchBandsPolicy = `
domains:
  edge:
    - {name: one, match: [{key: one}], capacity: 1000000, refill: 1000/s}
    - name: two
      match: [{key: two}]
      limits:
        - {capacity: 1000000, refill: 1000/s}
        - {capacity: 100000000, refill: 100000000/d}
    - name: budget
      match: [{key: budget}]
      limits:
        - {capacity: 1000000, refill: 1000/s}
        - {budget: 100000000, per: month, time_zone: Europe/Madrid}
`

// BenchmarkBands is a decision of one descriptor on the memory store over
// 100,000 users, for a rule of one limit, of two, and of a limit and a
// calendar budget: what a band adds.
func BenchmarkBands(b *testing.B) {
	for _, key := range []string{"one", "two", "budget"} {
		b.Run(key, func(b *testing.B) {
			svc := newFixtureWith(b, benchBandsPolicy, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil).svc
			d := descr(key, "u")
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
			users := benchUserNames()
			benchLoop(b, svc, req, func(i int) { d.Entries[0].Value = users[i%len(users)] })
		})
	}
}

// TestBandsShadowAndCandidate: a shadow rule of several limits answers OK
// and counts its refusal; a candidate policy of several limits decides
// them on its own store and never the answer.
func TestBandsShadowAndCandidate(t *testing.T) {
	src := func(shadow string) string {
		return "domains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n" + shadow +
			"      limits:\n        - {capacity: 10, refill: 1/m}\n        - {capacity: 3, refill: 1/h}\n"
	}
	f := newFixtureWith(t, src("      shadow: true\n"), func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
	for range 4 {
		if r := f.call(t, 0, descr("user_id", "a")); r.OverallCode != ok {
			t.Fatalf("a shadow rule refused: %v", r)
		}
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "per-user", metrics.ResultShadowOverLimit)); got != 1 {
		t.Errorf("shadow_over_limit %v, want 1 (the second limit's fourth request)", got)
	}

	g := newFixture(t, nil)
	cand, err := policy.Parse("c.yaml", []byte(src("")))
	if err != nil {
		t.Fatal(err)
	}
	cand.Activate()
	cm := withCandidate(t, g, perUserPolicy(t, "10"), cand)
	for range 4 {
		if r := g.call(t, 0, descr("user_id", "a")); r.OverallCode != ok {
			t.Fatalf("the candidate decided the answer: %v", r)
		}
	}
	if got := testutil.ToFloat64(cm.Decisions.WithLabelValues("edge", "per-user", metrics.ResultOverLimit)); got != 1 {
		t.Errorf("candidate over_limit %v, want 1", got)
	}
}
