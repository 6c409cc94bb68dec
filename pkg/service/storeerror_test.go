package service

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/metrics"
)

const answersPolicy = `
domains:
  edge:
    - name: strict
      match: [{key: tenant}]
      capacity: 1
      refill: 1/h
      on_store_error: deny
    - name: open
      match: [{key: path}]
      capacity: 1
      refill: 1/h
      on_store_error: allow
    - name: per-user
      match: [{key: user_id}]
      capacity: 2
      refill: 1/h
      on_store_error: local
    - name: watch-ip
      match: [{key: remote_address}]
      capacity: 1
      refill: 1/h
      shadow: true
`

// TestStoreErrorAnswers: a descriptor whose store failed is counted as
// result store_error and in tokengate_store_error_answers_total by the
// answer its on_store_error gave, never as over_limit or
// shadow_over_limit, so that a dashboard tells a failing store's
// OVER_LIMIT from a spent bucket's.
func TestStoreErrorAnswers(t *testing.T) {
	svc, flaky, m := flakyService(t, "answers.yaml", answersPolicy)
	for _, step := range []struct {
		name string
		fail bool
		d    *ratelimitv3.RateLimitDescriptor
		want rlsv3.RateLimitResponse_Code
	}{
		{"real over limit: first", false, descr("tenant", "a"), ok},
		{"real over limit: second", false, descr("tenant", "a"), over},
		{"shadow over limit", false, descr("remote_address", "1"), ok},
		{"shadow over limit again", false, descr("remote_address", "1"), ok},
		{"deny", true, descr("tenant", "b"), over},
		{"allow", true, descr("path", "/"), ok},
		{"local budget of 1", true, descr("user_id", "u"), ok},
		{"local budget spent", true, descr("user_id", "u"), over},
		{"shadow, store failed", true, descr("remote_address", "2"), ok},
	} {
		flaky.fail = step.fail
		r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{step.d}})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if r.OverallCode != step.want || step.fail != degradedOf(r) {
			t.Fatalf("%s: %v, want %v, degraded %v", step.name, r, step.want, step.fail)
		}
	}
	for _, c := range []struct {
		rule, result string
		want         float64
	}{
		{"strict", metrics.ResultOverLimit, 1},
		{"strict", metrics.ResultStoreError, 1},
		{"open", metrics.ResultStoreError, 1},
		{"per-user", metrics.ResultStoreError, 2},
		{"per-user", metrics.ResultOverLimit, 0},
		{"watch-ip", metrics.ResultShadowOverLimit, 1},
		{"watch-ip", metrics.ResultStoreError, 1},
	} {
		if got := testutil.ToFloat64(m.Decisions.WithLabelValues("edge", c.rule, c.result)); got != c.want {
			t.Errorf("decisions{rule=%s,result=%s} = %v, want %v", c.rule, c.result, got, c.want)
		}
	}
	for _, c := range []struct {
		rule, mode, answer string
		want               float64
	}{
		{"strict", "deny", metrics.AnswerOverLimit, 1},
		{"strict", "deny", metrics.AnswerOK, 0},
		{"open", "allow", metrics.AnswerOK, 1},
		{"open", "allow", metrics.AnswerOverLimit, 0},
		{"per-user", "local", metrics.AnswerOK, 1},
		{"per-user", "local", metrics.AnswerOverLimit, 1},
		{"watch-ip", "local", metrics.AnswerOK, 1}, // a shadow rule always answers OK; local, the default
		{"watch-ip", "local", metrics.AnswerOverLimit, 0},
	} {
		if got := testutil.ToFloat64(m.StoreErrorAnswers.WithLabelValues("edge", c.rule, c.mode, c.answer)); got != c.want {
			t.Errorf("store_error_answers{rule=%s,mode=%s,answer=%s} = %v, want %v", c.rule, c.mode, c.answer, got, c.want)
		}
	}
	// Every rule's series exist before its store ever fails.
	if n := testutil.CollectAndCount(m.StoreErrorAnswers); n != 8 {
		t.Errorf("%d store_error_answers series, want 2 for each of 4 rules", n)
	}
	for mode, want := range map[string]float64{"deny": 1, "allow": 1, "local": 3} { // local: per-user twice, watch-ip
		if got := testutil.ToFloat64(m.StoreFallbacks.WithLabelValues(mode)); got != want {
			t.Errorf("fallbacks{mode=%s} = %v, want %v", mode, got, want)
		}
	}
}
