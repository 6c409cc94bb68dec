// Package storetest is the conformance suite every store.Store runs: Run
// checks the contract of store.Store (all-or-nothing, duplicates, versions,
// replays, bad requests, post-paid items, reservations, concurrency) and
// rapid state machines against a simple model built on pkg/bucket.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// Factory returns a new, empty store; the suite decides with explicit
// Request.Now instants, so the store must decide at Request.Now.
type Factory func(t *testing.T) store.Store

// Options are what the suite knows of a store beyond the contract; the
// zero Options are none.
type Options struct {
	// Sweep, when set, is the store's janitor (memory.Store.Sweep): the
	// reservation model sweeps at random instants too, and holds the
	// store to the model's sweep (reservemodel.go).
	Sweep func(s store.Store, now int64)
}

// Run runs the whole suite against stores from newStore; opts (at most
// one is meant; several are merged) say what else the suite may use.
func Run(t *testing.T, newStore Factory, opts ...Options) {
	var o Options
	for _, x := range opts {
		if x.Sweep != nil {
			o.Sweep = x.Sweep
		}
	}
	t.Run("burst then refill", func(t *testing.T) { testBurstThenRefill(t, newStore(t)) })
	t.Run("all or nothing", func(t *testing.T) { testAllOrNothing(t, newStore(t)) })
	t.Run("never affordable", func(t *testing.T) { testNeverAffordable(t, newStore(t)) })
	t.Run("duplicate keys", func(t *testing.T) { testDuplicateKeys(t, newStore(t)) })
	t.Run("check and refund", func(t *testing.T) { testCheckAndRefund(t, newStore(t)) })
	t.Run("clock backwards", func(t *testing.T) { testClockBackwards(t, newStore(t)) })
	t.Run("versions", func(t *testing.T) { testVersions(t, newStore(t)) })
	t.Run("replay", func(t *testing.T) { testReplay(t, newStore(t)) })
	t.Run("invalid", func(t *testing.T) { testInvalid(t, newStore(t)) })
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, newStore(t)) })
	t.Run("budget", func(t *testing.T) { testBudget(t, newStore(t)) })
	runPostPaid(t, newStore)
	t.Run("model", func(t *testing.T) { testModel(t, newStore) })
	runReserve(t, newStore, o.Sweep)
}

const sec = int64(time.Second)

// Version returns a first version of a rule with the given capacity and
// rate, published as its lineage's current version.
func Version(t testing.TB, id uint64, capacity int64, rate string) *bucket.Version {
	t.Helper()
	v := bucket.NewVersion(id, Params(t, capacity, rate), 0)
	v.Lineage().Publish(v)
	return v
}

// Params returns validated bucket parameters of a capacity and a rate such
// as "10/s", failing the test on a bad value.
func Params(t testing.TB, capacity int64, rate string) bucket.Params {
	t.Helper()
	r, err := bucket.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bucket.NewParams(capacity, r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// call decides one request and fails the test on an error.
func call(t testing.TB, s store.Store, now int64, id string, items ...store.Item) (store.Outcome, []store.Result) {
	t.Helper()
	res := make([]store.Result, len(items))
	out, err := s.Decide(context.Background(), &store.Request{Now: now, ID: id, Items: items}, res)
	if err != nil {
		t.Fatalf("decide at %d: %v", now, err)
	}
	return out, res
}

// remaining reads a bucket's whole tokens with a check-only request.
func remaining(t testing.TB, s store.Store, now int64, key string, v *bucket.Version) int64 {
	t.Helper()
	_, res := call(t, s, now, "", store.Item{Key: key, Version: v})
	return res[0].Remaining
}

func testBurstThenRefill(t *testing.T, s store.Store) {
	v := Version(t, 1, 5, "1/s")
	out, res := call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: 5})
	if !out.Allowed || res[0].Remaining != 0 || res[0].ResetAfter != 5*sec {
		t.Fatalf("burst of 5: %+v %+v", out, res[0])
	}
	out, res = call(t, s, sec/4, "", store.Item{Key: "a", Version: v, Cost: 2})
	if out.Allowed || res[0].RetryAfter != 2*sec-sec/4 || res[0].Remaining != 0 {
		t.Fatalf("reject: %+v %+v", out, res[0])
	}
	out, res = call(t, s, 2*sec, "", store.Item{Key: "a", Version: v, Cost: 2})
	if !out.Allowed || res[0].Remaining != 0 {
		t.Fatalf("after refill: %+v %+v", out, res[0])
	}
	if got := remaining(t, s, 100*sec, "a", v); got != 5 {
		t.Fatalf("long idle: %d tokens, want 5", got)
	}
}

func testAllOrNothing(t *testing.T, s store.Store) {
	v := Version(t, 1, 10, "1/s")
	call(t, s, 0, "", store.Item{Key: "b", Version: v, Cost: 9})
	out, res := call(t, s, 0, "",
		store.Item{Key: "a", Version: v, Cost: 4},
		store.Item{Key: "b", Version: v, Cost: 2},
		store.Item{Key: "c", Version: v, Cost: -3})
	if out.Allowed || !res[0].Allowed || res[1].Allowed || res[0].Remaining != 10 || res[1].Remaining != 1 {
		t.Fatalf("one over the limit: %+v %+v", out, res)
	}
	if a, b := remaining(t, s, 0, "a", v), remaining(t, s, 0, "b", v); a != 10 || b != 1 {
		t.Fatalf("rejected request charged something: a=%d b=%d", a, b)
	}
	out, _ = call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: 4}, store.Item{Key: "b", Version: v, Cost: 1})
	if !out.Allowed || remaining(t, s, 0, "a", v) != 6 || remaining(t, s, 0, "b", v) != 0 {
		t.Fatal("allowed request did not charge every bucket")
	}
}

func testNeverAffordable(t *testing.T, s store.Store) {
	v := Version(t, 1, 3, "1/s")
	out, res := call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: 1}, store.Item{Key: "b", Version: v, Cost: 4})
	if out.Allowed || !res[1].Never || res[1].RetryAfter != 0 || res[1].Remaining != 3 {
		t.Fatalf("cost above capacity: %+v %+v", out, res)
	}
	if remaining(t, s, 0, "a", v) != 3 {
		t.Fatal("a never-affordable item let its neighbour be charged")
	}
}

func testDuplicateKeys(t *testing.T, s store.Store) {
	v := Version(t, 1, 5, "1/s")
	a := store.Item{Key: "a", Version: v, Cost: 3}
	out, res := call(t, s, 0, "", a, a)
	if out.Allowed || !res[0].Allowed || res[1].Allowed || res[1].Remaining != 5 {
		t.Fatalf("3+3 of 5 on one bucket: %+v %+v", out, res)
	}
	a.Cost = 2
	out, res = call(t, s, 0, "", a, a)
	if !out.Allowed || res[1].Remaining != 1 || remaining(t, s, 0, "a", v) != 1 {
		t.Fatalf("2+2 of 5 on one bucket: %+v %+v", out, res)
	}
}

func testCheckAndRefund(t *testing.T, s store.Store) {
	v := Version(t, 1, 10, "1/s")
	call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: 8})
	if out, res := call(t, s, 0, "", store.Item{Key: "a", Version: v}); !out.Allowed || res[0].Remaining != 2 {
		t.Fatalf("check only: %+v %+v", out, res)
	}
	if _, res := call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: -5}); res[0].Remaining != 7 {
		t.Fatalf("refund 5: %+v", res)
	}
	if _, res := call(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: -50}); res[0].Remaining != 10 || res[0].ResetAfter != 0 {
		t.Fatalf("refund caps at capacity: %+v", res)
	}
}

func testClockBackwards(t *testing.T, s store.Store) {
	v := Version(t, 1, 2, "1/s")
	call(t, s, 10*sec, "", store.Item{Key: "a", Version: v, Cost: 2})
	out, res := call(t, s, 5*sec, "", store.Item{Key: "a", Version: v, Cost: 1})
	if out.Allowed || res[0].RetryAfter != 6*sec {
		t.Fatalf("clock 5s behind the cursor: %+v %+v", out, res)
	}
	if out, _ := call(t, s, 11*sec, "", store.Item{Key: "a", Version: v, Cost: 1}); !out.Allowed {
		t.Fatal("refill after the cursor was lost")
	}
}

func testVersions(t *testing.T, s store.Store) {
	v1 := Version(t, 1, 100, "10/s")
	call(t, s, 0, "", store.Item{Key: "a", Version: v1, Cost: 30})
	v2 := v1.Next(2, Params(t, 10, "10/s"), sec, bucket.Scale) // 80 at 1s -> 8
	v2.Lineage().Publish(v2)
	if _, res := call(t, s, sec, "", store.Item{Key: "a", Version: v2, Cost: 1}); res[0].Remaining != 7 {
		t.Fatalf("100->10 scale with 80 held: %d left after 1, want 7", res[0].Remaining)
	}
	// A request still holding the old policy must not move the bucket back.
	if _, res := call(t, s, sec, "", store.Item{Key: "a", Version: v1}); res[0].Remaining != 7 {
		t.Fatalf("stale version moved the bucket back: %d tokens", res[0].Remaining)
	}
}

func testReplay(t *testing.T, s store.Store) {
	v := Version(t, 1, 10, "1/h")
	a := store.Item{Key: "a", Version: v, Cost: 2}
	out1, res1 := call(t, s, 0, "req-1", a)
	out2, res2 := call(t, s, sec/2, "req-1", a)
	if !out1.Allowed || out1.Replayed || !out2.Replayed || out2.Allowed != out1.Allowed || res2[0] != res1[0] {
		t.Fatalf("replay: first %+v %+v, repeat %+v %+v", out1, res1, out2, res2)
	}
	if _, res := call(t, s, sec/2, "req-2", a); res[0].Remaining != 6 {
		t.Fatalf("a replay was charged: a second request found %d tokens, want 6", res[0].Remaining+2)
	}
	// The same id asking for other buckets or costs is decided anew, and
	// remembered apart: a repeat of it replays its own answer (a report
	// after its check, retried, is charged once).
	other := store.Item{Key: "a", Version: v, Cost: 1}
	if out, res := call(t, s, sec/2, "req-1", other); out.Replayed || res[0].Remaining != 5 {
		t.Fatalf("same id, other cost: %+v %+v", out, res)
	}
	if out, res := call(t, s, sec/2, "req-1", other); !out.Replayed || res[0].Remaining != 5 {
		t.Fatalf("same id, other cost, repeated: %+v %+v, want its own answer replayed", out, res)
	}
	b := store.Item{Key: "b", Version: v, Cost: 1}
	if out, res := call(t, s, sec/2, "req-1", b, a); out.Replayed || res[0].Remaining != 9 || res[1].Remaining != 3 {
		t.Fatalf("same id, another first bucket: %+v %+v", out, res)
	}
	if out, res := call(t, s, sec/2, "req-1", b, a); !out.Replayed || res[0].Remaining != 9 || res[1].Remaining != 3 {
		t.Fatalf("same id, another first bucket, repeated: %+v %+v, want its own answer replayed", out, res)
	}
	// An id is replayed at most MaxReplays times: a client that picks its
	// own ids cannot repeat one allowed request for free forever.
	for range store.MaxReplays - 1 {
		if out, _ := call(t, s, sec/2, "req-1", a); !out.Replayed {
			t.Fatal("replay refused before MaxReplays")
		}
	}
	if out, res := call(t, s, sec/2, "req-1", a); out.Replayed || res[0].Remaining != 1 {
		t.Fatalf("replay number %d: %+v %+v", store.MaxReplays+1, out, res)
	}
}

func testInvalid(t *testing.T, s store.Store) {
	v := Version(t, 1, 3, "1/s")
	bad := [][]store.Item{
		{{Key: "a", Version: v, Cost: 3}, {Key: "b", Cost: 1}},
		make([]store.Item, store.MaxItems+1),
	}
	for i := range bad[1] {
		bad[1][i] = store.Item{Key: "a", Version: v, Cost: 1}
	}
	for _, items := range bad {
		res := make([]store.Result, len(items))
		_, err := s.Decide(context.Background(), &store.Request{Items: items}, res)
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%d items: got error %v, want ErrInvalid", len(items), err)
		}
	}
	if _, err := s.Decide(context.Background(), &store.Request{Items: bad[0][:1]}, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no room for results: got %v, want ErrInvalid", err)
	}
	if remaining(t, s, 0, "a", v) != 3 {
		t.Fatal("an invalid request changed state")
	}
}
