package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokengate/tokengate/internal/tgproc"
)

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// TestHealthFollowsStore: a failing store turns StoreHealthService
// NOT_SERVING and tokengate_store_degraded 1, and back; readiness ("",
// the ratelimit service, /readyz) follows it only with ReadyRequiresStore;
// liveness (/healthz) never.
func TestHealthFollowsStore(t *testing.T) {
	for _, requires := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "ready requires store"}[requires], func(t *testing.T) {
			var failing atomic.Bool
			s := newStack(t, "domains: {}\n", nil)
			srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log,
				ReadyRequiresStore: requires, Store: func() error {
					if failing.Load() {
						return errors.New("redis: ping: connection refused")
					}
					return nil
				}})
			conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			get := func(path string) (int, string) {
				t.Helper()
				resp, err := http.Get("http://" + srv.HTTPAddr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			readiness := []string{"", "envoy.service.ratelimit.v3.RateLimitService"}

			tgproc.WaitHealth(t, conn, StoreHealthService, serving)
			for _, svc := range readiness {
				if got := tgproc.Health(t, conn, svc); got != serving {
					t.Errorf("health %q with the store up: %v", svc, got)
				}
			}
			if code, body := get("/readyz"); code != 200 || body != "ready\n" {
				t.Errorf("/readyz with the store up: %d %q", code, body)
			}

			failing.Store(true)
			tgproc.WaitHealth(t, conn, StoreHealthService, notServing)
			wantReady, wantCode := serving, 200
			if requires {
				wantReady, wantCode = notServing, 503
			}
			for _, svc := range readiness {
				if got := tgproc.Health(t, conn, svc); got != wantReady {
					t.Errorf("health %q with the store failing: %v, want %v", svc, got, wantReady)
				}
			}
			if code, body := get("/readyz"); code != wantCode || !strings.Contains(body, "connection refused") {
				t.Errorf("/readyz with the store failing: %d %q, want %d naming the error", code, body, wantCode)
			}
			if code, _ := get("/healthz"); code != 200 {
				t.Errorf("/healthz with the store failing: %d", code)
			}
			if g := testutil.ToFloat64(s.m.StoreDegraded); g != 1 {
				t.Errorf("tokengate_store_degraded %v with the store failing, want 1", g)
			}

			failing.Store(false)
			tgproc.WaitHealth(t, conn, StoreHealthService, serving)
			tgproc.WaitHealth(t, conn, "", serving)
			if g := testutil.ToFloat64(s.m.StoreDegraded); g != 0 {
				t.Errorf("tokengate_store_degraded %v with the store back, want 0", g)
			}
		})
	}
}

// TestHealthWithoutStoreCheck: a store that always decides (memory) is
// SERVING on StoreHealthService.
func TestHealthWithoutStoreCheck(t *testing.T) {
	srv, _ := startServer(t, "domains: {}\n")
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tgproc.WaitHealth(t, conn, StoreHealthService, serving)
	tgproc.WaitHealth(t, conn, "", serving)
}

// TestReadyFollowsPolicySource: until the policy source has delivered
// (Options.Ready), readiness is NOT_SERVING and /readyz 503.
func TestReadyFollowsPolicySource(t *testing.T) {
	var delivered atomic.Bool
	s := newStack(t, "domains: {}\n", nil)
	srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log,
		Ready: func() error {
			if !delivered.Load() {
				return errors.New("no rate limit config received yet")
			}
			return nil
		}})
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readyz := func() int {
		resp, err := http.Get("http://" + srv.HTTPAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tgproc.WaitHealth(t, conn, "", notServing)
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the first policy: %d", code)
	}
	delivered.Store(true)
	tgproc.WaitHealth(t, conn, "", serving)
	if code := readyz(); code != http.StatusOK {
		t.Errorf("/readyz after the first policy: %d", code)
	}
}
