package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/xdstest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// usageLimit is the limit in the reference's format: 1000 an
// hour on user_id.
const usageLimit = "domain: llm\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"

// askUsage is Envoy Gateway's call for user u: hits_addend 0 at request
// time (a check), the tokens used after the response (a report).
func askUsage(t *testing.T, svc *service.Service, n uint64) *rlsv3.RateLimitResponse {
	t.Helper()
	r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "u"}}, HitsAddend: wrapperspb.UInt64(n),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// threeCalls is the table: check, report 5000 of 1000, check.
// Every hit charged, the last check is OVER_LIMIT (the reference: until
// its window turns; here until the debt is repaid); pre-paid
// (--reference-charge before_request), the refused report charges nothing.
func threeCalls(t *testing.T, s settings, clk *clock.Fake, src policySource) {
	t.Helper()
	svc, err := service.New(service.Options{Policy: src.current, Store: memory.New(memory.Options{Clock: clk}), StoreName: "memory",
		Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	last := over
	if s.ReferenceCharge == "before_request" {
		last = rlsv3.RateLimitResponse_OK
	}
	for i, c := range []struct {
		hits uint64
		want rlsv3.RateLimitResponse_Code
	}{{0, rlsv3.RateLimitResponse_OK}, {5000, over}, {0, last}} {
		if r := askUsage(t, svc, c.hits); r.OverallCode != c.want {
			t.Fatalf("--reference-charge %s: call %d (hits_addend %d): %v, want %v", s.ReferenceCharge, i, c.hits, r, c.want)
		}
	}
	clk.Add(time.Hour) // the debt of one window, repaid
	if r := askUsage(t, svc, 0); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("--reference-charge %s: a check an hour later: %v", s.ReferenceCharge, r)
	}
}

// TestReferenceChargeXDS: the table on a config from xDS (as
// Envoy Gateway renders a usage-based limit), charged every hit by
// default and pre-paid with --reference-charge before_request.
func TestReferenceChargeXDS(t *testing.T) {
	for _, charge := range []string{"every_hit", "before_request"} {
		t.Run(charge, func(t *testing.T) {
			m := xdstest.Start(t, "127.0.0.1:0", nil)
			m.Set(t, "1", &rlsconf.RateLimitConfig{Name: "default/eg/llm", Domain: "llm", Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: "user_id", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1000},
			}}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := loadSettings([]string{"--xds-server", m.Addr, "--xds-node-id", xdstest.NodeID, "--reference-charge", charge})
			if err != nil {
				t.Fatal(err)
			}
			clk := new(clock.Fake)
			clk.Set(int64(time.Hour))
			src, err := loadPolicy(ctx, s, clk, metrics.New(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			poll.Eventually(t, 10*time.Second, func() bool { return src.ready() == nil }, "the xDS config")
			threeCalls(t, s, clk, src)
		})
	}
}

// TestReferenceChargeRatelimit: invoked as ratelimit, the reference's
// files charge every hit unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is
// true; either way the policy loads for the reference's store, Redis, and
// the same settings on the memory store give the table.
func TestReferenceChargeRatelimit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(usageLimit), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1"}
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", stop), func(t *testing.T) {
			s, _, err := compatSettings(append(env, fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", stop)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := new(clock.Fake)
			clk.Set(int64(time.Hour))
			m := metrics.New(prometheus.NewRegistry())
			if s.Store != "redis" {
				t.Fatalf("invoked as ratelimit: store %q, want redis", s.Store)
			}
			if _, err := loadPolicy(ctx, s, clk, m, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatalf("on Redis: %v", err)
			}
			s.Store = "memory"
			src, err := loadPolicy(ctx, s, clk, m, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			threeCalls(t, s, clk, src)
		})
	}
}

func TestReferenceChargeSetting(t *testing.T) {
	if _, err := loadSettings([]string{"--reference-charge", "after_response"}); err == nil ||
		!strings.Contains(err.Error(), `--reference-charge "after_response": want every_hit or before_request`) {
		t.Fatalf("--reference-charge after_response: %v", err)
	}
	t.Setenv("TOKENGATE_REFERENCE_CHARGE", "before_request")
	if s, err := loadSettings(nil); err != nil || !newCompiler(s, nil).ReferencePrepaid {
		t.Fatalf("TOKENGATE_REFERENCE_CHARGE=before_request: %v, %+v", err, s)
	}
}
