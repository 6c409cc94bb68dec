package service

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const budgetPolicy = `
domains:
  edge:
    - name: llm
      match: [{key: user_id}]
      limits:
        - {capacity: 100, refill: 100/s}
        - {budget: 250, per: month, time_zone: Europe/Madrid}
`

// TestBudgetAcrossMonthEnd: a calendar budget spent within its month
// refuses, with retry-after the time to the month's end, comes back whole
// at the boundary, and its past month's bucket is dropped by the sweep.
func TestBudgetAcrossMonthEnd(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	// Reading 0 is 2026-03-31 22:00 in Madrid: two hours to April.
	anchor := clock.AnchorAt(time.Date(2026, 3, 31, 22, 0, 0, 0, loc), 0)
	pol, err := (&policy.Compiler{Anchor: anchor}).Compile("p.yaml", []byte(budgetPolicy), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	st := memory.New(memory.Options{Clock: clk})
	svc, err := New(Options{Policy: func() *policy.Policy { return pol }, Store: st, StoreName: "memory", Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: svc, clk: clk, store: st}
	for range 2 {
		if r := f.call(t, 100, descr("user_id", "a")); r.OverallCode != ok {
			t.Fatalf("within the budget: %v", r)
		}
		clk.Add(time.Second)
	}
	// 50 left of the month's 250; the refilling band is full again.
	r := f.call(t, 60, descr("user_id", "a"))
	st0 := r.Statuses[0]
	wantLimit := &rlsv3RateLimit{Name: "llm", RequestsPerUnit: 250, Unit: monthUnit}
	if r.OverallCode != over || st0.LimitRemaining != 50 || st0.CurrentLimit.String() != wantLimit.String() || header(r, HeaderRetryAfter) != "7198" {
		t.Fatalf("over the budget: %v, remaining %d, limit %v, retry-after %q; want 50, %v, 7198 (to April)", r.OverallCode, st0.LimitRemaining, st0.CurrentLimit, header(r, HeaderRetryAfter), wantLimit)
	}
	if f.balance(t, "llm", 0, "user_id", "a") != 100 {
		t.Error("the refilling band was charged for a refused request")
	}
	// Nothing refills within the month.
	clk.Set(int64(2*time.Hour - time.Second))
	if r := f.call(t, 60, descr("user_id", "a")); r.OverallCode != over || header(r, HeaderRetryAfter) != "1" {
		t.Fatalf("a second before April: %v, retry-after %q", r.OverallCode, header(r, HeaderRetryAfter))
	}
	st.Sweep(clk.Now())
	if got := f.balance(t, "llm", 1, "user_id", "a"); got != 50 || st.Stats().Dropped[memory.Expired] != 0 {
		t.Errorf("after a sweep within the month the budget holds %d (want 50), %d expired", got, st.Stats().Dropped[memory.Expired])
	}
	// April: whole again; March's bucket expires.
	clk.Set(int64(2 * time.Hour))
	st.Sweep(clk.Now())
	if n := st.Stats().Dropped[memory.Expired]; n != 1 || st.Stats().Buckets != 0 {
		t.Errorf("the sweep at April expired %d buckets (want March's), %d left", n, st.Stats().Buckets)
	}
	if r := f.call(t, 100, descr("user_id", "a")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("in April: %v", r)
	}
	if got := f.balance(t, "llm", 1, "user_id", "a"); got != 150 {
		t.Errorf("April's budget holds %d, want 150", got)
	}
}

type rlsv3RateLimit = rlsv3.RateLimitResponse_RateLimit

const monthUnit = rlsv3.RateLimitResponse_RateLimit_MONTH
