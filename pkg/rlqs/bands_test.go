package rlqs

import (
	"context"
	"strings"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// TestBoundSimulatedBands: on a rule of two limits whose second is the
// tighter one (a smaller capacity, a slower rate), the Envoys together
// allow at most the second's capacity + rate*t (simulate checks every
// band at every step): a lease is paid from both.
func TestBoundSimulatedBands(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		first := boundBand{capacity: rapid.Int64Range(2, 400).Draw(t, "capacity"), perSecond: rapid.Int64Range(2, 200).Draw(t, "perSecond")}
		second := boundBand{capacity: rapid.Int64Range(1, first.capacity-1).Draw(t, "capacity2"), perSecond: rapid.Int64Range(1, first.perSecond-1).Draw(t, "perSecond2")}
		r := boundRun{
			bands:         []boundBand{first, second},
			noAssignAllow: rapid.Bool().Draw(t, "noAssignAllow"),
			replicas:      rapid.IntRange(1, 3).Draw(t, "replicas"),
			concurrency:   rapid.IntRange(1, 4).Draw(t, "concurrency"),
			envoys:        drawEnvoys(t),
		}
		r.simulate(t)
	})
}

// TestBoundBudgetPeriod: a rate with a day's budget, the day ending 3 s
// into the run, before the Envoys (asking four times the rate) have
// spent it: they allow at most the budget in each day (simulate checks
// it at every step), though leases were running when the day ended (a
// lease paid from one day must end with it), and the next day's budget
// serves them again.
func TestBoundBudgetPeriod(t *testing.T) {
	r := boundRun{
		bands: []boundBand{{capacity: 100, perSecond: 50}, {budget: 400}},
		wall:  time.Date(2026, 5, 1, 23, 59, 57, 0, time.UTC),
		envoys: []boundEnvoy{
			{interval: time.Second, perStep: 1, users: 1},
			{interval: 700 * time.Millisecond, phase: 130 * time.Millisecond, delay: 200 * time.Millisecond, perStep: 1, users: 1},
		},
	}
	allowed, _ := r.simulate(t)
	if allowed <= 400 {
		t.Fatalf("allowed %d in two days of a budget of 400: the second day's budget never served", allowed)
	}
	t.Logf("allowed %d over two days of 400", allowed)
}

const budgetPolicy = `
domains:
  edge:
    - name: daily
      match: [{key: user}]
      limits: [{budget: 900000, per: day}]
`

// TestBudgetOnly: a rule whose only limit is a day's budget is leased at
// its pace (900000 over the longest day, 25 h: 10 a second), paid from
// the day's bucket; a lease never outlives the day (its TTL ends it), and
// a spent budget is DENY_ALL until the next day's bucket pays again.
func TestBudgetOnly(t *testing.T) {
	f := newFixtureAt(t, budgetPolicy, Options{}, time.Date(2026, 5, 1, 23, 59, 50, 0, time.UTC))
	rule := f.pol.Load().Rule("edge", "daily")
	id := map[string]string{"user": "a"}
	entries := []policy.Entry{{Key: "user", Value: "a"}}
	// dayBalance is what the day's bucket holds now, read at cost 0.
	dayBalance := func() int64 {
		t.Helper()
		return f.decideBand(rule, entries, 0, 0)
	}
	c := f.open()
	a := only(t, must(c.send(report("edge", id, 0, 1))))
	if tb := tokenBucketOf(t, a); tb.GetTokensPerFill().GetValue() != 10 || tb.GetFillInterval().AsDuration() != time.Second {
		t.Fatalf("token bucket %v, want 10 per 1s (the pace)", tb)
	}
	// 10 of burst, 10/s for 2.25 s ahead.
	if got := dayBalance(); got != 900000-33 {
		t.Fatalf("the day's balance %d, want %d", got, 900000-33)
	}

	// 1.5 s before midnight the lease lives 1 s (it must end by then,
	// with the slack); 0.5 s before, none is given.
	f.clk.Add(8500 * time.Millisecond)
	if ttl := only(t, must(c.send(report("", id, 5, 0)))).GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != time.Second {
		t.Fatalf("ttl %v 1.5 s before the day ends, want 1s", ttl)
	}
	f.clk.Add(time.Second)
	if rule, ok := blanketOf(only(t, must(c.send(report("", id, 5, 0))))); !ok || rule != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("0.5 s before the day ends: %v, want DENY_ALL", rule)
	}

	// The next day: a new bucket pays; spend it (as ShouldRateLimit
	// would) down to what less than a lease holds, and the lease is DENY_ALL.
	f.clk.Add(time.Second)
	tokenBucketOf(t, only(t, must(c.send(report("", id, 0, 5)))))
	if got := dayBalance(); got != 900000-33 {
		t.Fatalf("the next day's balance %d, want %d", got, 900000-33)
	}
	f.decideBand(rule, entries, 0, 900000-33)
	f.clk.Add(2 * time.Second)
	if rule, ok := blanketOf(only(t, must(c.send(report("", id, 0, 5))))); !ok || rule != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("a spent budget: %v, want DENY_ALL", rule)
	}
	if got := dayBalance(); got != 0 {
		t.Fatalf("a spent budget holds %d", got)
	}
}

// decideBand charges cost (0: reads) on band i of rule for entries now,
// as a pre-paid request would, and returns what the band holds after it.
func (f *fixture) decideBand(rule *policy.Rule, entries []policy.Entry, i int, cost int64) int64 {
	f.t.Helper()
	now := f.clk.Now()
	req := &store.Request{Now: now, Items: []store.Item{{Key: string(rule.AppendBandKey(nil, entries, i, now)), Version: rule.Bands[i].Version, Cost: cost}}}
	res := make([]store.Result, 1)
	if out, err := f.store.Decide(context.Background(), req, res); err != nil || cost > 0 && !out.Allowed {
		f.t.Fatalf("charging %d: %v, %v", cost, out, err)
	}
	return res[0].Remaining - res[0].Debt
}

const postPaidPolicy = `
domains:
  edge:
    - name: tokens
      match: [{key: team}]
      charge: after_response
      max_debt: 30
      limits: [{capacity: 100, refill: 10/s}, {capacity: 50, refill: 5/s}]
    - name: hits
      match: [{key: client}]
      capacity: 20
      refill: 1/s
      charge: every_hit
      max_debt: 20
`

// TestPostPaidLeases: a lease is pre-paid on every rule: on a post-paid
// one it is taken only from what every band holds, never into debt; what
// Envoy reports beyond it is charged on every band, down to max_debt; a
// band in debt leases nothing until it is repaid. On a rule charged every
// hit the requests Envoy denied are charged too.
func TestPostPaidLeases(t *testing.T) {
	f := newFixture(t, postPaidPolicy, Options{})
	rule := f.pol.Load().Rule("edge", "tokens")
	team := []policy.Entry{{Key: "team", Value: "x"}}
	balances := func() (first, second int64) {
		t.Helper()
		return f.decideBand(rule, team, 0, 0), f.decideBand(rule, team, 1, 0)
	}
	c := f.open()
	id := map[string]string{"team": "x"}
	// The slower band's rate: 5 per second, paid on both (5 + 12).
	if tb := tokenBucketOf(t, only(t, must(c.send(report("edge", id, 0, 1))))); tb.GetTokensPerFill().GetValue() != 5 {
		t.Fatalf("token bucket %v, want 5 per fill (the slower band's)", tb)
	}
	if a, b := balances(); a != 100-17 || b != 50-17 {
		t.Fatalf("balances %d, %d after the lease, want %d, %d", a, b, 100-17, 50-17)
	}
	// Once the lease has run out (its TTL, 2 s), 200 requests beyond the
	// 17 paid: charged on both bands, each down to -30, and no new lease
	// can be paid from a debt: DENY_ALL.
	f.clk.Add(3 * time.Second)
	if rule, ok := blanketOf(only(t, must(c.send(report("", id, 217, 0))))); !ok || rule != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("in debt: %v, want DENY_ALL", rule)
	}
	if a, b := balances(); a != -30 || b != -30 {
		t.Fatalf("balances %d, %d after the overage, want -30 each (max_debt)", a, b)
	}
	// The second band repays its 30 at 5/s in 6 s: nothing to lease yet;
	// a second later 5 tokens, which pay a lease of 1 (1 + 3 ahead).
	f.clk.Add(6 * time.Second)
	if rule, ok := blanketOf(only(t, must(c.send(report("", id, 0, 1))))); !ok || rule != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("repaid to 0: %v, want DENY_ALL", rule)
	}
	f.clk.Add(time.Second)
	if tb := tokenBucketOf(t, only(t, must(c.send(report("", id, 0, 1))))); tb.GetTokensPerFill().GetValue() != 1 {
		t.Fatalf("token bucket %v, want 1 per fill (what 5 tokens pay)", tb)
	}
	if a, b := balances(); a < 0 || b != 1 {
		t.Fatalf("a lease took the balances to %d, %d (want the second at 1)", a, b)
	}

	// every_hit: 100 denied requests, reported once the lease has run
	// out, are charged, down to -20.
	client := map[string]string{"client": "c"}
	tokenBucketOf(t, only(t, must(c.send(report("", client, 0, 1)))))
	f.clk.Add(3 * time.Second)
	if rule, ok := blanketOf(only(t, must(c.send(report("", client, 0, 100))))); !ok || rule != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("every hit charged: %v, want DENY_ALL", rule)
	}
	if got := f.balance("edge", "hits", policy.Entry{Key: "client", Value: "c"}); got != -20 {
		t.Fatalf("every_hit balance %d, want -20", got)
	}
	if got := testutil.ToFloat64(f.svc.m.forgiven.WithLabelValues("edge", "hits")); got <= 0 {
		t.Fatalf("forgiven %v, want what was beyond -20", got)
	}
}

// TestExplainBands: explain --rlqs and validate say how a rule of several
// limits, or of a budget, is leased; a rule of one limit gets no line.
func TestExplainBands(t *testing.T) {
	pol := newFixture(t, postPaidPolicy, Options{}).pol.Load()
	_, got, err := Explain(pol, "edge", map[string]string{"team": "x"})
	if want := "5 requests (of 1 tokens) per fill_interval 1s"; err != nil || !strings.Contains(got, want) ||
		!strings.Contains(got, "each lease is paid from all 2 of its limits at once [capacity 100, refill 10/s; capacity 50, refill 5/s], at the slowest one's rate") {
		t.Errorf("Explain: %q, %v", got, err)
	}
	if notes := Reach(pol); len(notes) != 1 || !strings.Contains(notes[0], `rlqs: domain "edge" rule "tokens" (policy.yaml:4): each lease is paid from all 2 of its limits`) {
		t.Errorf("Reach: %q", notes)
	}
	budget := newFixtureAt(t, budgetPolicy, Options{}, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)).pol.Load()
	if _, got, err := Explain(budget, "edge", map[string]string{"user": "a"}); err != nil || !strings.Contains(got, "10 requests (of 1 tokens) per fill_interval 1s") ||
		!strings.Contains(got, "[budget 900000 per day in UTC], at the budget's pace (over its longest period), and ends with its period") {
		t.Errorf("Explain of a budget: %q, %v", got, err)
	}
}
