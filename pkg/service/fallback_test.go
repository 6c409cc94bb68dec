package service

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/local"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const localPolicy = `
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 10
      refill: 1/h
      on_store_error: local
    - name: strict
      match: [{key: tenant}]
      capacity: 100
      refill: 1/s
      on_store_error: deny
    - name: open
      match: [{key: path}]
      capacity: 1
      refill: 1/h
      on_store_error: allow
`

// TestStoreErrorLocal: while the store fails, a rule with on_store_error
// local decides from its share of the local budget (here a half: 5 of 10),
// marked degraded, with a retry time; a deny rule in the same request
// makes it check only; Redis's return ends the degraded answers.
func TestStoreErrorLocal(t *testing.T) {
	svc, flaky, m := flakyService(t, "local.yaml", localPolicy)
	call := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	flaky.fail = true
	for i := range 5 {
		r := call(descr("user_id", "alice"))
		if r.OverallCode != ok || !degradedOf(r) || r.Statuses[0].LimitRemaining != uint32(4-i) {
			t.Fatalf("local call %d: %v", i, r)
		}
	}
	r := call(descr("user_id", "alice"))
	if r.OverallCode != over || !degradedOf(r) || header(r, HeaderRetryAfter) != "7200" {
		t.Fatalf("local budget of 5 spent: %v", r)
	}
	// A deny rule in the request: over the limit, and the local budget of
	// bob is only checked.
	r = call(descr("user_id", "bob"), descr("tenant", "t"))
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
		t.Fatalf("local and deny: %v", r)
	}
	if r := call(descr("user_id", "bob")); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("the denied request charged the local budget: %v", r)
	}
	if r := call(descr("path", "/x"), descr("user_id", "carol")); r.OverallCode != ok {
		t.Fatalf("allow and local: %v", r)
	}
	if got := testutil.ToFloat64(m.StoreFallbacks.WithLabelValues("local")); got != 9 {
		t.Fatalf("local fallbacks counted %v, want 9", got)
	}
	// The store is back: its own balance (untouched, 10) answers again.
	flaky.fail = false
	if r := call(descr("user_id", "alice")); r.OverallCode != ok || degradedOf(r) || r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("after recovery: %v", r)
	}
}

// switchable fails while fail is set, else decides with ok.
type switchable struct {
	ok interface {
		Decide(context.Context, *store.Request, []store.Result) (store.Outcome, error)
	}
	fail bool
}

func (s *switchable) Decide(ctx context.Context, req *store.Request, res []store.Result) (store.Outcome, error) {
	if s.fail {
		return failing{}.Decide(ctx, req, res)
	}
	return s.ok.Decide(ctx, req, res)
}

// flakyService is a Service of the policy src on a store that fails while
// its switch is on, with a local budget of a half for on_store_error local.
func flakyService(t *testing.T, name, src string) (*Service, *switchable, *metrics.Metrics) {
	t.Helper()
	pol, err := policy.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	flaky := &switchable{ok: memory.New(memory.Options{Clock: clk})}
	budget, err := local.New(local.Options{Share: 0.5, Memory: memory.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	svc, err := New(Options{Policy: func() *policy.Policy { return pol }, Store: flaky, Local: budget, StoreName: "redis", Metrics: m, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return svc, flaky, m
}
