package service

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/candidate"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store/redis"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// redisClient is a client of a real redis-server started for tb, both
// closed when tb ends.
func redisClient(tb testing.TB) rueidis.Client {
	tb.Helper()
	srv := redistest.Start(tb)
	client, err := redisconn.Dial(redisconn.Config{Addr: srv.Addr(), DialTimeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(client.Close)
	return client
}

// BenchmarkShouldRateLimitRedis is BenchmarkShouldRateLimit on a real
// redis-server, without a candidate, with one decided in line, and with
// one decided on its own goroutine (Async, what serve does for Redis): a
// second Redis store on the same client, its own key prefix.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	client := redisClient(b)
	clk := clock.NewMonotonic()
	newStore := func(prefix string) *redis.Store {
		st, err := redis.New(redis.Options{Client: client, KeyPrefix: prefix, Timeout: time.Second, Clock: clk})
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	pol.Activate()
	cand, err := policy.Parse("candidate.yaml", []byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	cand.Activate()
	for _, bc := range []struct {
		name        string
		cand, async bool
	}{{"live", false, false}, {"candidate", true, false}, {"candidate-async", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			opts := Options{Policy: func() *policy.Policy { return pol }, Store: newStore("bench:" + bc.name + ":"), Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk}
			if bc.cand {
				opts.Candidate = &Candidate{Policy: func() *policy.Policy { return cand }, Store: newStore("bench:" + bc.name + ":candidate:"), Async: bc.async,
					Tracker: candidate.New(candidate.Options{Metrics: metrics.NewCandidate(prometheus.NewRegistry()), Clock: clk})}
			}
			svc, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			benchUsers(b, svc, nil)
		})
	}
}
