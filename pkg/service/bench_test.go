package service

import (
	"context"
	"strconv"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
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
	benchUsers(b, newFixture(b, nil).svc, nil)
}

// benchUsers asks svc about 100,000 users in turn, one descriptor each,
// b.Loop times, calling before (when not nil) before each request.
func benchUsers(b *testing.B, svc *Service, before func()) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}}
	entry := req.Descriptors[0].Entries[0]
	users := benchUserNames()
	benchLoop(b, svc, req, func(i int) {
		entry.Value = users[i%len(users)]
		if before != nil {
			before()
		}
	})
}

// benchUserNames are 100,000 user ids.
func benchUserNames() []string {
	users := make([]string, 100_000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	return users
}

// benchLoop asks svc req b.Loop times, calling step(i) before the i-th.
func benchLoop(b *testing.B, svc *Service, req *rlsv3.RateLimitRequest, step func(int)) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		step(i)
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

const benchPostPaidPolicy = `
domains:
  edge:
    - name: plain
      match: [{key: user_id}]
      capacity: 1000000000
      refill: 1000000000/s
    - name: tokens
      match: [{key: llm_user}]
      capacity: 1000000000
      refill: 1000000000/s
      charge: after_response
    - name: every-hit
      match: [{key: hit_user}]
      capacity: 1000000000
      refill: 1000000000/s
      charge: every_hit
    - name: stop-when-over
      match: [{key: stop_user}]
      capacity: 1000000000
      refill: 1000000000/s
      charge: stop_when_over
`

// BenchmarkPostPaid is a post-paid rule's decisions against a plain one's
// on the memory store, per decision, over 100,000 users one descriptor
// each: "plain" charges 1 before the request; "check+report" alternates a
// request-time check (its own hits_addend 0) and a report of 3, as Envoy
// Gateway calls for one LLM request; "every_hit" the same calls on a rule
// that charges every hit (the reference's files), "stop_when_over" on one
// that charges only the hits that go over (the reference's files with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true).
func BenchmarkPostPaid(b *testing.B) {
	for _, c := range []struct {
		name, key string
		hits      []*wrapperspb.UInt64Value // the descriptor's own hits_addend, in turn
	}{
		{"plain", "user_id", []*wrapperspb.UInt64Value{nil}},
		{"check+report", "llm_user", []*wrapperspb.UInt64Value{wrapperspb.UInt64(0), wrapperspb.UInt64(3)}},
		{"every_hit", "hit_user", []*wrapperspb.UInt64Value{wrapperspb.UInt64(0), wrapperspb.UInt64(3)}},
		{"stop_when_over", "stop_user", []*wrapperspb.UInt64Value{wrapperspb.UInt64(0), wrapperspb.UInt64(3)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			svc := newFixtureWith(b, benchPostPaidPolicy, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil).svc
			d := descr(c.key, "u")
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
			users := benchUserNames()
			benchLoop(b, svc, req, func(i int) {
				// A user's check and report come one after the other.
				d.Entries[0].Value = users[i/len(c.hits)%len(users)]
				d.HitsAddend = c.hits[i%len(c.hits)]
			})
		})
	}
}
