package redis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestClockSteps: the Redis host's wall clock stepped while a replica
// runs moves nothing. A drained 100-token 10/s bucket: after a step of
// +3h, a cost of 100 is still refused and its key is still there (a key
// expired early would be a fresh, full bucket); after a step of -1h the
// bucket goes on refilling at 10/s.
func TestClockSteps(t *testing.T) {
	srv, shift := redistest.StartShifted(t)
	c := newClient(t, srv.Addr())
	clk := new(clock.Fake)
	s := newStore(t, c, Options{Clock: clk, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 100, "10/s")
	at := func(d time.Duration, cost int64) (store.Outcome, store.Result) {
		t.Helper()
		clk.Set(int64(d))
		res := make([]store.Result, 1)
		out, err := s.Decide(context.Background(), &store.Request{Now: clk.Now(), Items: []store.Item{{Key: "k", Version: v, Cost: cost}}}, res)
		if err != nil {
			t.Fatal(err)
		}
		return out, res[0]
	}
	if out, _ := at(0, 100); !out.Allowed {
		t.Fatal("a full bucket refused its capacity")
	}
	shift.Set(3 * time.Hour)
	if d := redisTime(t, c) - time.Now().UnixNano(); d < int64(3*time.Hour-time.Minute) {
		t.Fatalf("the shim did not step the Redis host's clock: TIME is %v ahead", time.Duration(d))
	}
	if out, r := at(100*time.Millisecond, 100); out.Allowed || r.Remaining != 1 {
		t.Fatalf("+3h on the Redis host: %v %+v, want refused with 1 token (100ms at 10/s)", out, r)
	}
	if n, _ := c.Do(context.Background(), c.B().Exists().Key(s.bucketKey(tagBytes("k"))).Build()).AsInt64(); n != 1 {
		t.Fatal("+3h on the Redis host expired a drained bucket's key")
	}
	shift.Set(-time.Hour)
	if out, r := at(2*time.Second, 20); !out.Allowed || r.Remaining != 0 {
		t.Fatalf("-1h on the Redis host: %v %+v, want 20 tokens refilled in 2s, all spent", out, r)
	}
	if out, r := at(3*time.Second, 10); !out.Allowed {
		t.Fatalf("-1h on the Redis host froze the refill: %v %+v", out, r)
	}
}

// TestClockAnchor: the first replica takes the Redis host's TIME; a
// replica that starts later takes the time the first one published,
// whatever its own monotonic reading, and so agrees with it.
func TestClockAnchor(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	first, second := new(clock.Fake), new(clock.Fake)
	first.Set(int64(time.Hour))
	second.Set(5 * int64(time.Hour))
	a := newStore(t, c, Options{Clock: first})
	b := newStore(t, c, Options{Clock: second})
	ctx := context.Background()
	wall := time.Now().UnixNano()
	na, err := a.now(ctx, first.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d := na - wall; d < -int64(time.Second) || d > int64(time.Second) {
		t.Fatalf("the first replica's shared time is %v from the wall clock, want Redis's TIME", time.Duration(d))
	}
	nb, err := b.now(ctx, second.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d := nb - na; d < 0 || d > int64(time.Second) {
		t.Fatalf("the second replica is %v from the first, want it anchored on the first's published time", time.Duration(d))
	}
	// Once anchored, a replica's shared time is its monotonic clock moved
	// by a fixed offset.
	second.Add(time.Minute)
	if nb2, _ := b.now(ctx, second.Now()); nb2-nb != int64(time.Minute) {
		t.Fatalf("a minute on the replica's clock is %v on the shared clock", time.Duration(nb2-nb))
	}
}

// redisTime is Redis's TIME in ns.
func redisTime(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	tm, err := c.Do(context.Background(), c.B().Time().Build()).AsIntSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	return tm[0]*int64(time.Second) + tm[1]*int64(time.Microsecond)
}
