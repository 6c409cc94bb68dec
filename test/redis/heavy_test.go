package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tokengate/tokengate/internal/redistest"
)

const heavyPolicy = `
revision: 1
domains:
  edge:
    - name: ordinary
      match: [{key: tenant}]
      capacity: 1000000
      refill: 1000/s
      on_store_error: deny
    - name: heavy
      match: [{key: item}]
      capacity: 1000000
      refill: 1000/s
      on_store_error: allow
`

const (
	heavyWorkers    = 64 // concurrent 64-descriptor requests of the flooding client
	ordinaryWorkers = 2  // concurrent 1-descriptor requests of the other client
	floodFor        = 3 * time.Second
)

// TestHeavyRequestsDoNotStarveOthers: one client floods 64-descriptor
// requests on fresh keys while another sends ordinary one-descriptor
// requests. Admission (pkg/store/redis/internal/admission) keeps the
// flood to its share of the replica's Redis work, so every ordinary answer
// is Redis's own (never on_store_error's: its rule denies), and the
// circuit breaker never opens: Redis is up, one client is merely
// expensive.
//
// The timeout is 50ms, not the default: on a small machine that runs the
// client, tokengate and Redis at once, CPU contention alone puts ordinary
// answers past 10ms at times, admission or not. With 64 workers the flood
// queues well over 50ms of Redis work without admission (ordinary answers
// then fall back by the hundred and the breaker opens), so the test still
// tells the two apart.
func TestHeavyRequestsDoNotStarveOthers(t *testing.T) {
	srv := redistest.Start(t)
	p := start(t, "--store", "redis", "--redis-addr", srv.Addr(), "--policy", writeFile(t, heavyPolicy), "--redis-timeout", "50ms")
	if r := p.ask(t, descriptor("tenant", "warm")); r.OverallCode != ok || degraded(r) {
		t.Fatalf("healthy: %v", r)
	}
	// The flooding client has its own connection, as another Envoy would.
	flood, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	floodRLS := rlsv3.NewRateLimitServiceClient(flood)

	var (
		wg                   sync.WaitGroup
		heavy, heavyDegraded atomic.Int64
		ordinary, fellBack   atomic.Int64
		notOK                atomic.Int64
		firstBad             atomic.Value
		mu                   sync.Mutex
		latencies            []time.Duration
		circuitSeen          atomic.Bool
		rpcErrors            atomic.Int64
	)
	begin := time.Now()
	running := func() bool { return time.Since(begin) < floodFor }
	for w := range heavyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Requests built once, so that the client spends its CPU
			// sending them: 64 distinct keys each, whose buckets are full
			// again (deleted) 1ms after a hit, so each call writes afresh.
			var reqs [8]*rlsv3.RateLimitRequest
			for k := range reqs {
				reqs[k] = &rlsv3.RateLimitRequest{Domain: "edge"}
				for i := range 64 {
					reqs[k].Descriptors = append(reqs[k].Descriptors, descriptor("item", fmt.Sprintf("%d-%d-%d", w, k, i)))
				}
			}
			for n := 0; running(); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := floodRLS.ShouldRateLimit(ctx, reqs[n%len(reqs)])
				cancel()
				if err != nil {
					rpcErrors.Add(1)
					return
				}
				heavy.Add(1)
				if degraded(r) {
					heavyDegraded.Add(1)
				}
			}
		}()
	}
	for w := range ordinaryWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); latencies = append(latencies, mine...); mu.Unlock() }()
			tenant := descriptor("tenant", "ordinary-"+strconv.Itoa(w))
			for running() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				r, err := p.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{tenant}})
				cancel()
				if err != nil {
					rpcErrors.Add(1)
					return
				}
				mine = append(mine, time.Since(t0))
				ordinary.Add(1)
				deg := degraded(r)
				if deg {
					fellBack.Add(1)
				}
				if deg || r.OverallCode != ok {
					notOK.Add(1)
					firstBad.CompareAndSwap(nil, r.String())
				}
			}
		}()
	}
	// The breaker gauge, sampled through the run (the circuit_open counter
	// below catches an opening between samples).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running() {
			if p.Metric(t, "tokengate_redis_circuit_open") == "1" {
				circuitSeen.Store(true)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()

	slices.Sort(latencies)
	pct := func(q float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]
	}
	metric := func(s string) string {
		if v := p.Metric(t, s); v != "" {
			return v
		}
		return "0"
	}
	t.Logf("%v: heavy %d requests (%d degraded) by %d workers; ordinary %d requests (%d degraded, %d not OK), latency p50 %v p99 %v max %v",
		time.Since(begin).Round(time.Millisecond), heavy.Load(), heavyDegraded.Load(), heavyWorkers,
		ordinary.Load(), fellBack.Load(), notOK.Load(), pct(0.5), pct(0.99), pct(1))
	t.Logf("redis errors: shed %s, timeout %s, error %s, circuit_open %s; fallbacks deny %s, allow %s",
		metric(`tokengate_redis_errors_total{reason="shed"}`), metric(`tokengate_redis_errors_total{reason="timeout"}`),
		metric(`tokengate_redis_errors_total{reason="error"}`), metric(`tokengate_redis_errors_total{reason="circuit_open"}`),
		metric(`tokengate_store_fallbacks_total{mode="deny"}`), metric(`tokengate_store_fallbacks_total{mode="allow"}`))

	if n := rpcErrors.Load(); n > 0 {
		t.Fatalf("%d RPCs failed", n)
	}
	if ordinary.Load() == 0 || heavy.Load() == 0 {
		t.Fatalf("nothing ran: %d ordinary, %d heavy", ordinary.Load(), heavy.Load())
	}
	if n := fellBack.Load(); n > 0 {
		t.Errorf("%d of %d ordinary requests answered by on_store_error", n, ordinary.Load())
	}
	if n := notOK.Load(); n > 0 {
		t.Errorf("%d ordinary answers not Redis's OK, the first: %v", n, firstBad.Load())
	}
	if n := metric(`tokengate_store_fallbacks_total{mode="deny"}`); n != "0" {
		t.Errorf("on_store_error deny answered %s descriptors", n)
	}
	if circuitSeen.Load() || metric("tokengate_redis_circuit_open") != "0" || metric(`tokengate_redis_errors_total{reason="circuit_open"}`) != "0" {
		t.Errorf("the circuit breaker opened while Redis was up")
	}
}
