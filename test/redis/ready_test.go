package redis

import (
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// TestReadyWhileRedisLost: with Redis stopped, tokengate stays ready (gRPC
// health of "" SERVING, /readyz 200), since on_store_error answers; the
// health service tokengate.store and tokengate_store_degraded say Redis is
// lost, and back once it returns. With --ready-requires-store, readiness
// follows Redis, as before. Liveness (/healthz) never does.
func TestReadyWhileRedisLost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     []string
		lostReady healthpb.HealthCheckResponse_ServingStatus
		lostCode  int
	}{
		{"default", nil, serving, 200},
		{"ready requires store", []string{"--ready-requires-store"}, notServing, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := start(t, append([]string{"--store", "redis", "--redis-addr", srv.Addr(), "--redis-timeout", "50ms"}, tc.flags...)...)
			tgproc.WaitHealth(t, p.Conn, "tokengate.store", serving)
			tgproc.WaitHealth(t, p.Conn, "", serving)
			if g := p.Metric(t, "tokengate_store_degraded"); g != "0" {
				t.Errorf("tokengate_store_degraded %q with Redis up, want 0", g)
			}

			srv.Stop()
			tgproc.WaitHealth(t, p.Conn, "tokengate.store", notServing)
			if got := tgproc.Health(t, p.Conn, ""); got != tc.lostReady {
				t.Errorf("health \"\" with Redis lost: %v, want %v", got, tc.lostReady)
			}
			if got := tgproc.Health(t, p.Conn, "envoy.service.ratelimit.v3.RateLimitService"); got != tc.lostReady {
				t.Errorf("health of the ratelimit service with Redis lost: %v, want %v", got, tc.lostReady)
			}
			if code, body := p.Get(t, "/readyz"); code != tc.lostCode {
				t.Errorf("/readyz with Redis lost: %d %q, want %d", code, body, tc.lostCode)
			}
			if code, _ := p.Get(t, "/healthz"); code != 200 {
				t.Errorf("/healthz with Redis lost: %d", code)
			}
			if g := p.Metric(t, "tokengate_store_degraded"); g != "1" {
				t.Errorf("tokengate_store_degraded %q with Redis lost, want 1", g)
			}

			srv.Restart()
			tgproc.WaitHealth(t, p.Conn, "tokengate.store", serving)
			tgproc.WaitHealth(t, p.Conn, "", serving)
			if code, _ := p.Get(t, "/readyz"); code != 200 {
				t.Errorf("/readyz with Redis back: %d", code)
			}
			if g := p.Metric(t, "tokengate_store_degraded"); g != "0" {
				t.Errorf("tokengate_store_degraded %q with Redis back, want 0", g)
			}
		})
	}
}
