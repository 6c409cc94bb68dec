package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/service"
)

const (
	prepaidPolicy = "domains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h}\n"
	postPaidRule  = "domains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h, charge: after_response, max_debt: 100000}\n"
)

// tempPolicy is a policy file's path in a test's directory and what
// writes it.
func tempPolicy(t *testing.T) (string, func(content string)) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	return path, func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// redisService is serve's wiring of src on the Redis backend s names:
// the backend, closed at the test's end, under a service.
func redisService(ctx context.Context, t *testing.T, s settings, src policySource, clk clock.Clock, log *slog.Logger) *service.Service {
	t.Helper()
	reg := prometheus.NewRegistry()
	be, err := openRedis(ctx, s, reg, clk, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.close)
	svc, err := service.New(service.Options{Policy: src.current, Store: be.store, Local: be.local, StoreName: be.name,
		Metrics: metrics.New(reg), Clock: clk, Logger: log, KeyHash: keyhash.Random()})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestRedisServesPostPaid: with --store redis, as with the memory store, a
// policy with a post-paid rule loads at the start, on a reload and as the
// candidate, and serve's wiring (the Redis backend under the service)
// decides it: issue 22's table, a check that passes with the whole
// budget, a report of 5000 on 1000 charged whole (OVER_LIMIT, a debt of
// 4000), then a check refused while in debt.
func TestRedisServesPostPaid(t *testing.T) {
	srv := redistest.Start(t)
	path, write := tempPolicy(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.NewMonotonic()
	redis := []string{"--store", "redis", "--redis-addr", srv.Addr()}
	load := func(args ...string) (settings, policySource) {
		t.Helper()
		s, err := loadSettings(args)
		if err != nil {
			t.Fatal(err)
		}
		src, err := loadPolicy(ctx, s, clk, metrics.New(prometheus.NewRegistry()), log)
		if err != nil {
			t.Fatal(err)
		}
		return s, src
	}

	write(prepaidPolicy)
	s, src := load(append(redis, "--policy", path)...)
	write(postPaidRule)
	if err := src.file.Reload(); err != nil {
		t.Fatalf("reload to a post-paid rule with --store redis: %v", err)
	}
	if !src.current().Rule("llm", "tokens").PostPaid() {
		t.Fatal("the post-paid rule does not serve after the reload")
	}
	cs, err := loadSettings(append(redis, "--candidate-policy", path))
	if err != nil {
		t.Fatal(err)
	}
	cand, err := loadCandidate(ctx, cs, clk, prometheus.NewRegistry(), keyhash.Random(), log)
	if err != nil {
		t.Fatal(err)
	}
	if p := cand.file.Current(); p == nil || !p.Rule("llm", "tokens").PostPaid() {
		t.Fatal("a post-paid candidate policy did not load with --store redis")
	}

	_, src = load(append(redis, "--policy", path)...)
	svc := redisService(ctx, t, s, src, clk, log)
	call := func(hits uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "alice"}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}}
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	if r := call(0); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("check: %v", r)
	}
	if r := call(5000); r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 || r.DynamicMetadata.GetFields()["debt"].GetNumberValue() != 4000 {
		t.Fatalf("report of 5000: %v", r)
	}
	if r := call(0); r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("check in debt: %v", r)
	}
}

// TestRedisServesBudgets: with --store redis, as with the memory store, a
// policy with a calendar budget loads at the start and on a reload, and
// serve's wiring decides it: 600 of a daily 1000 allowed, 600 more
// refused with 400 left, then those 400 allowed.
func TestRedisServesBudgets(t *testing.T) {
	ctx, log, clk := t.Context(), slog.New(slog.DiscardHandler), clock.NewMonotonic()
	path, write := tempPolicy(t)
	write(prepaidPolicy)
	s, err := loadSettings([]string{"--store", "redis", "--redis-addr", redistest.Start(t).Addr(), "--policy", path})
	if err != nil {
		t.Fatal(err)
	}
	src, err := loadPolicy(ctx, s, clk, metrics.New(prometheus.NewRegistry()), log)
	if err != nil {
		t.Fatal(err)
	}
	write("domains:\n  llm:\n    - name: tokens\n      match: [{key: user_id}]\n      limits:\n        - {budget: 1000, per: day, time_zone: Europe/Madrid}\n")
	if err := src.file.Reload(); err != nil {
		t.Fatalf("reload to a budget with --store redis: %v", err)
	}
	if !src.current().Rule("llm", "tokens").HasBudget() {
		t.Fatal("the budget does not serve after the reload")
	}
	// serve's start: the policy as loaded with the budget in it.
	if src, err = loadPolicy(ctx, s, clk, metrics.New(prometheus.NewRegistry()), log); err != nil {
		t.Fatalf("start with a budget and --store redis: %v", err)
	}
	svc := redisService(ctx, t, s, src, clk, log)
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i, want := range []struct {
		hits uint64
		code rlsv3.RateLimitResponse_Code
		left uint32
	}{{600, ok, 400}, {600, over, 400}, {400, ok, 0}} {
		req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "alice"}},
			HitsAddend: wrapperspb.UInt64(want.hits),
		}}}
		r, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != want.code || r.Statuses[0].LimitRemaining != want.left {
			t.Fatalf("call %d of %d hits: %v, want %v with %d left", i, want.hits, r, want.code, want.left)
		}
	}
}
