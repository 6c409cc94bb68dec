package service

import (
	"context"
	"strconv"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestConcurrentCalls runs many goroutines through one service on shared
// and private buckets: under -race, and no more allowed than capacity.
func TestConcurrentCalls(t *testing.T) {
	f := newFixture(t, nil)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := f.call(t, 0, descr("user_id", "shared"), descr("user_id", "own-"+strconv.Itoa(g*1000+i)))
				if r.OverallCode == ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 5 {
		t.Fatalf("%d requests allowed on a bucket of 5 with the clock stopped", allowed)
	}
}

// BenchmarkShouldRateLimit is the whole handler for one descriptor, without
// gRPC: match, key, store decision, response.
func BenchmarkShouldRateLimit(b *testing.B) {
	benchUsers(b, newFixture(b, nil).svc)
}

// benchUsers asks svc for one descriptor of 100k users in turn.
func benchUsers(b *testing.B, svc *Service) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}}
	entry := req.Descriptors[0].Entries[0]
	users := make([]string, 100_000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		entry.Value = users[i%len(users)]
		i++
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
