package rlqs

import (
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// TestBoundAcrossRedisReplicas: three Envoys on two tokengate replicas,
// each with its own Redis store and client on one real redis-server:
// their leases come out of the one bucket, so together they stay within
// the bound (every step checked, as in TestBoundSimulated), though each
// replica shares the whole rate among its own streams.
func TestBoundAcrossRedisReplicas(t *testing.T) {
	srv := redistest.Start(t)
	r := boundRun{capacity: 300, perSecond: 100, replicas: 2, concurrency: 8, envoys: []boundEnvoy{
		{interval: time.Second, perStep: 2, users: 2},
		{interval: 800 * time.Millisecond, phase: 70 * time.Millisecond, delay: 30 * time.Millisecond, perStep: 3, users: 2},
		{interval: time.Second, phase: 510 * time.Millisecond, delay: 240 * time.Millisecond, perStep: 1, users: 1},
	}, stores: func(_ tester, clk *clock.Fake, n int) []store.Store {
		var sts []store.Store
		for i := range n {
			client, err := redisconn.Dial(redisconn.Config{Addr: srv.Addr(), DialTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			st, err := redis.New(redis.Options{Client: client, KeyPrefix: "rlqs:", Timeout: time.Second, Clock: clk})
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			sts = append(sts, st)
		}
		return sts
	}}
	allowed, bound := r.simulate(t)
	if allowed*100 < bound*50 {
		t.Fatalf("allowed %d of the bound %d: under half", allowed, bound)
	}
	t.Logf("allowed %d, bound %d (%d%%)", allowed, bound, allowed*100/bound)
}

// BenchmarkReportsRedis is BenchmarkReports on a real redis-server: what
// Redis spends (INFO cpu, user and system) per usage reported, and the
// service's CPU per message.
func BenchmarkReportsRedis(b *testing.B) {
	srv := redistest.Start(b)
	client, err := redisconn.Dial(redisconn.Config{Addr: srv.Addr(), DialTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	for _, concurrency := range []int{1, 64} {
		b.Run(strconv.Itoa(concurrency), func(b *testing.B) { benchmarkReportsRedis(b, client, srv.Addr(), concurrency) })
	}
}

func benchmarkReportsRedis(b *testing.B, client rueidis.Client, addr string, concurrency int) {
	redisCPU := func() float64 {
		var n float64
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, err := strconv.ParseFloat(redistest.Info(b, addr, "cpu", f), 64)
			if err != nil {
				b.Fatal(err)
			}
			n += v
		}
		return n
	}
	var before float64
	benchmarkReportsOn(b, Options{Concurrency: concurrency}, func(clk *clock.Fake) store.Store {
		st, err := redis.New(redis.Options{Client: client, KeyPrefix: "bench:" + strconv.Itoa(concurrency) + ":", Timeout: time.Second, Clock: clk})
		if err != nil {
			b.Fatal(err)
		}
		return st
	}, func(*rlqsv3.RateLimitQuotaResponse) error { return nil }, func() { before = redisCPU() }, func(usages int) {
		b.ReportMetric((redisCPU()-before)*1e9/float64(usages), "redis-cpu-ns/usage")
	})
}
