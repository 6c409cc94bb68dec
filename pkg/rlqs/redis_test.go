package rlqs

import (
	"testing"
	"time"

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
	r := boundRun{capacity: 300, perSecond: 100, replicas: 2, envoys: []boundEnvoy{
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
