package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestRollbackMatchesMemory: through policy changes, rollbacks (a lower
// revision applied after a higher one, as helm rollback or git revert do)
// and re-applied files, the Redis store answers every request exactly as
// the memory store does: code, remaining, reset, retry-after and reason,
// the whole response. Both decide under one process's policies, as a
// replica does.
func TestRollbackMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		clk := new(clock.Fake)
		var comp policy.Compiler
		var cur *policy.Policy
		serving := func() *policy.Policy { return cur }
		keys := keyhash.Random() // one process's: the metadata names buckets alike
		mem := rollbackService(rt, memory.New(memory.Options{Clock: clk}), clk, keys, serving)
		red := rollbackService(rt, newStore(t, c, Options{RequestTime: true, KeyPrefix: fmt.Sprintf("rb%d:", n)}), clk, keys, serving)
		files := rapid.SliceOfN(rapid.Custom(rollbackPolicy), 2, 4).Draw(rt, "policies")
		apply := func(i int) {
			p, err := comp.Compile("policy.yaml", []byte(files[i]), cur, clk.Now())
			if err != nil {
				rt.Fatalf("policy %d: %v", i, err)
			}
			p.Activate()
			cur = p
		}
		apply(0)
		for step := range rapid.IntRange(5, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0: // a change, or a rollback to any earlier file
				apply(rapid.IntRange(0, len(files)-1).Draw(rt, "file"))
			case 1, 2, 3:
				clk.Add(time.Duration(rapid.Int64Range(0, 3e9).Draw(rt, "advance")))
			default:
				user := rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "user")
				hits := uint32(rapid.IntRange(0, 12).Draw(rt, "hits"))
				req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
				}}}
				if hits == 0 {
					req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
				}
				want, err := mem.ShouldRateLimit(context.Background(), req)
				if err != nil {
					rt.Fatal(err)
				}
				got, err := red.ShouldRateLimit(context.Background(), req)
				if err != nil {
					rt.Fatal(err)
				}
				if !proto.Equal(got, want) {
					rt.Fatalf("step %d (%s, %d hits, revision %d): redis answered\n%v\nmemory\n%v", step, user, hits, cur.Revision(), got, want)
				}
			}
		}
	})
}

func rollbackService(t *rapid.T, st store.Store, clk *clock.Fake, keys *keyhash.Key, serving func() *policy.Policy) *service.Service {
	svc, err := service.New(service.Options{
		Policy: serving, Store: st, StoreName: "x", Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk, KeyHash: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// rollbackPolicy is a policy file of one rule with drawn parameters and
// revision.
func rollbackPolicy(t *rapid.T) string {
	return fmt.Sprintf("revision: %d\ndomains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: %d\n      refill: %d/s\n      on_resize: %s\n",
		rapid.IntRange(1, 9).Draw(t, "revision"), rapid.IntRange(1, 20).Draw(t, "capacity"), rapid.IntRange(1, 5).Draw(t, "rate"),
		rapid.SampledFrom([]string{"clamp", "scale"}).Draw(t, "on_resize"))
}

const sec = int64(time.Second)

// TestRollbackAcrossReplicas: two replicas on one Redis, each with its own
// versions. A change applied by one replica moves a bucket to the new
// parameters, and the other replica, still on the old policy, decides it
// under the new ones (never back); a rollback to a lower revision applied
// later moves it again, and a replica still on the revision it left keeps
// it there.
func TestRollbackAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	a := newStore(t, c, Options{RequestTime: true, KeyPrefix: "x:"})
	b := newStore(t, c, Options{RequestTime: true, KeyPrefix: "x:"})
	small, large := storetest.Params(t, 10, "1/s"), storetest.Params(t, 20, "1/s")
	// Both replicas start on revision 5 (capacity 10); b changes to
	// revision 6 (capacity 20) at 1s and rolls back to revision 5 at 4s;
	// a moves to revision 6 at 3s.
	a5 := bucket.NewVersion(1, small, 0)
	b5 := bucket.NewVersion(1, small, 0)
	b6 := b5.Next(2, large, 1*sec, bucket.Scale)
	a6 := a5.Next(2, large, 3*sec, bucket.Scale)
	b5again := b6.Next(3, small, 4*sec, bucket.Clamp)
	decide := func(s *Store, v *bucket.Version, rev, now, cost int64) int64 {
		t.Helper()
		res := make([]store.Result, 1)
		req := &store.Request{Now: now, Items: []store.Item{{Key: "k", Version: v, Revision: rev, Cost: cost}}}
		if _, err := s.Decide(context.Background(), req, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	for _, step := range []struct {
		what           string
		s              *Store
		v              *bucket.Version
		rev, now, cost int64
		want           int64
	}{
		{"a, revision 5", a, a5, 5, 0, 4, 6},
		{"b changes to revision 6: 7 of 10 scale to 14 of 20", b, b6, 6, 1 * sec, 2, 12},
		{"a, still on revision 5, decides under revision 6", a, a5, 5, 2 * sec, 1, 12},
		{"a moves to revision 6: the same parameters", a, a6, 6, 3 * sec, 1, 12},
		{"b rolls back to revision 5: 13 clamped to 10", b, b5again, 5, 4 * sec, 1, 9},
		{"a, still on revision 6, decides under the rollback", a, a6, 6, 5 * sec, 0, 10},
		{"a's revision 6 never comes back: full is 10", a, a6, 6, 30 * sec, 8, 2},
	} {
		if got := decide(step.s, step.v, step.rev, step.now, step.cost); got != step.want {
			t.Errorf("%s: %d tokens left, want %d", step.what, got, step.want)
		}
	}
}
