package redis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/redistest"
)

const sharedPolicy = `
revision: 1
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 100
      refill: 20/s
    - name: per-route
      match: [{key: route}]
      capacity: 1000000
      refill: 1000/s
`

// TestSharedQuota: two tokengate processes share one Redis; hammered at
// once with multi-descriptor requests, they together allow no more than
// capacity plus the refill over the run, and no less than capacity.
func TestSharedQuota(t *testing.T) {
	srv := redistest.Start(t)
	hammer(t, "--redis-addr", srv.Addr())
}

// TestSharedQuotaCluster is the same on a three-master Redis Cluster,
// where the two descriptors' buckets live in different slots (reserve and
// settle).
func TestSharedQuotaCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	hammer(t, "--redis-addr", strings.Join(cl.Addrs(), ","), "--redis-cluster")
}

func hammer(t *testing.T, redisFlags ...string) {
	pol := writeFile(t, sharedPolicy)
	flags := append([]string{"--store", "redis", "--policy", pol, "--redis-timeout", "1s"}, redisFlags...)
	procs := []*proc{start(t, flags...), start(t, flags...)}
	const workers, capacity, rate = 6, 100, 20.0
	var allowed, total, degradedAnswers atomic.Int64
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range 2 * workers {
		p := procs[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 1.5s, and on a starved machine until the requests exceed the
			// capacity (so that a limit is reached), for 20s at most.
			for d := time.Since(begin); d < 1500*time.Millisecond || total.Load() < 2*capacity && d < 20*time.Second; d = time.Since(begin) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := p.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user_id", "alice"), descriptor("route", "/r")}})
				cancel()
				if err != nil {
					t.Errorf("ShouldRateLimit: %v", err)
					return
				}
				total.Add(1)
				if degraded(r) {
					degradedAnswers.Add(1)
				}
				if r.OverallCode == rlsv3.RateLimitResponse_OK {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	limit := capacity + int64(rate*elapsed.Seconds()) + 1
	t.Logf("%d requests in %v: %d allowed (at most %d)", total.Load(), elapsed, allowed.Load(), limit)
	if degradedAnswers.Load() != 0 {
		t.Fatalf("%d degraded answers: Redis calls failed", degradedAnswers.Load())
	}
	if a := allowed.Load(); a > limit || a < capacity || total.Load() <= a {
		t.Fatalf("allowed %d of %d: want between %d and %d", a, total.Load(), capacity, limit)
	}
}
