package blackbox

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/tgproc"
)

const policyV1 = `revision: 1
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 3
      refill: 1/s
    - name: upload
      match: [{key: user_id}, {key: path, value: /upload/*}]
      capacity: 10
      refill: 1/m
      max_cost: 8
    - name: shadow-ip
      match: [{key: remote_address}]
      capacity: 1
      refill: 1/h
      shadow: true
`

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func startWithPolicy(t *testing.T, content string) (*tgproc.Proc, string) {
	t.Helper()
	path := tgproc.PolicyFile(t, content)
	return start(t, "--policy", path), path
}

func TestDecisions(t *testing.T) {
	p, _ := startWithPolicy(t, policyV1)

	t.Run("burst then refill", func(t *testing.T) {
		for i := range 3 {
			if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(2-i) {
				t.Fatalf("request %d of the burst: %v", i, r)
			}
		}
		r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice"))
		if r.OverallCode != over || tgproc.Header(r, "retry-after") != "1" {
			t.Fatalf("fourth request: %v", r)
		}
		time.Sleep(1100 * time.Millisecond)
		if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice")); r.OverallCode != ok {
			t.Fatalf("after a second: %v", r)
		}
	})
	t.Run("cost via hits_addend", func(t *testing.T) {
		up := tgproc.Descriptor("user_id", "bob", "path", "/upload/x")
		if r := p.Ask(t, "edge", 4, up); r.Statuses[0].LimitRemaining != 6 {
			t.Fatalf("request hits_addend 4: %v", r)
		}
		up.HitsAddend = wrapperspb.UInt64(5)
		if r := p.Ask(t, "edge", 4, up); r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("descriptor hits_addend 5: %v", r)
		}
	})
	t.Run("cost above max_cost and capacity", func(t *testing.T) {
		up := tgproc.Descriptor("user_id", "carol", "path", "/upload/x")
		up.HitsAddend = wrapperspb.UInt64(9)
		r := p.Ask(t, "edge", 0, up)
		if r.OverallCode != over || !strings.Contains(tgproc.Reason(r), "max_cost") || tgproc.Header(r, "x-tokengate-reason") != "" || tgproc.Header(r, "retry-after") != "" {
			t.Fatalf("cost 9 > max_cost 8: %v", r)
		}
		if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "carol", "path", "/upload/x")); r.Statuses[0].LimitRemaining != 9 {
			t.Fatalf("the refused request charged: %v", r)
		}
	})
	t.Run("all or nothing", func(t *testing.T) {
		for range 3 {
			p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "dave"))
		}
		r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "erin"), tgproc.Descriptor("user_id", "dave"))
		if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
			t.Fatalf("one of two over: %v", r)
		}
		if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "erin")); r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("erin was charged by the refused request: %v", r)
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		for range 5 {
			if r := p.Ask(t, "nowhere", 0, tgproc.Descriptor("user_id", "frank")); r.OverallCode != ok {
				t.Fatalf("unknown domain: %v", r)
			}
		}
	})
	t.Run("shadow", func(t *testing.T) {
		for i := range 3 {
			if r := p.Ask(t, "edge", 0, tgproc.Descriptor("remote_address", "192.0.2.1")); r.OverallCode != ok {
				t.Fatalf("shadow request %d: %v", i, r)
			}
		}
		if v := p.Metric(t, `tokengate_decisions_total{domain="edge",result="shadow_over_limit",rule="shadow-ip"}`); v != "2" {
			t.Fatalf("shadow_over_limit = %q, want 2", v)
		}
	})
	t.Run("request id replay", func(t *testing.T) {
		id := tgproc.Descriptor("request_id", "retry-me")
		a := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "gina"), id)
		b := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "gina"), id)
		if a.Statuses[0].LimitRemaining != 2 || b.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("replay: %v then %v", a, b)
		}
		if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "gina")); r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("the replay was charged: %v", r)
		}
	})
	t.Run("bad request", func(t *testing.T) {
		_, err := p.RLS.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no descriptors: %v", err)
		}
	})
	t.Run("health and metrics", func(t *testing.T) {
		if code, body := p.Get(t, "/readyz"); code != 200 {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		if code, _ := p.Get(t, "/healthz"); code != 200 {
			t.Fatalf("/healthz: %d", code)
		}
		h, err := healthpb.NewHealthClient(p.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("gRPC health: %v %v", h, err)
		}
		p.WantMetrics(t, map[string]string{
			`tokengate_decisions_total{domain="edge",result="over_limit",rule="per-user"}`: "2",
			`tokengate_decisions_total{domain="edge",result="refused",rule="upload"}`:      "1",
			`tokengate_policy_reloads_total{result="success"}`:                             "1",
		})
		if p.Metric(t, `tokengate_rpc_duration_seconds_count{code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}`) == "" {
			t.Error("no RPC latency histogram")
		}
	})
}

func TestHotReload(t *testing.T) {
	p, path := startWithPolicy(t, policyV1)
	p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "hank", "path", "/upload/a")) // 9 of 10 left
	// Capacity 10 -> 8 (clamp): the balance of 9 becomes 8.
	tgproc.WritePolicy(t, path, strings.Replace(strings.Replace(policyV1, "revision: 1", "revision: 2", 1), "capacity: 10", "capacity: 8", 1))
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_policy_reloads_total{result="success"}`) == "2"
	}, "revision 2")
	if _, body := p.Get(t, "/debug/policy"); !strings.Contains(body, `"revision": 2`) {
		t.Fatalf("/debug/policy after the reload: %s", body)
	}
	if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "hank", "path", "/upload/a")); r.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("after capacity 10 -> 8: %v", r)
	}
	// An invalid file changes nothing.
	tgproc.WritePolicy(t, path, policyV1+"    - name: broken\n      capacity: -1\n")
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_policy_reloads_total{result="failure"}`) == "1"
	}, "the failed reload")
	if _, body := p.Get(t, "/debug/policy"); !strings.Contains(body, `"revision": 2`) {
		t.Fatalf("an invalid reload replaced the policy: %s", body)
	}
	if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "hank", "path", "/upload/a")); r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("after the invalid reload: %v", r)
	}
}

// TestSIGTERMUnderLoad: SIGTERM while clients call; every call either
// succeeds or is refused as Unavailable before the server took it, none
// fails in flight, and the process exits 0.
func TestSIGTERMUnderLoad(t *testing.T) {
	p, _ := startWithPolicy(t, policyV1)
	var okCalls, unavailable, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := p.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{tgproc.Descriptor("user_id", string(rune('a'+w)))}})
				cancel()
				switch status.Code(err) {
				case codes.OK:
					okCalls.Add(1)
				case codes.Unavailable:
					unavailable.Add(1)
				default:
					failed.Add(1)
					t.Errorf("call failed in flight: %v", err)
				}
			}
		}()
	}
	poll.Eventually(t, tgproc.Timeout, func() bool { return okCalls.Load() >= 100 }, "100 calls")
	err := p.Stop(t)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed in flight (%d ok, %d unavailable)", failed.Load(), okCalls.Load(), unavailable.Load())
	}
	t.Logf("%d calls ok, %d refused as unavailable after shutdown began", okCalls.Load(), unavailable.Load())
}
