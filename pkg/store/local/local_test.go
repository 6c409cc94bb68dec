package local

import (
	"context"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		share        float64
		capacity     int64
		rate         string
		wantCapacity int64
		wantRate     string
	}{
		{1, 10, "5/s", 10, "5/s"},
		{0.5, 10, "5/s", 5, "5/2s"},
		{0.25, 3, "1/s", 1, "1/4s"},
		{0.333, 1000, "1000/s", 333, "333/s"},
		{0.001, bucket.MaxCapacity, "1000000000000/ns", bucket.MaxCapacity / 1000, "1000000000/ns"},
		{0.001, 5, "1/366d", 1, "1/366d"}, // the slowest rate cannot be slower: kept at the range's end
	} {
		s, err := New(Options{Share: tc.share})
		if err != nil {
			t.Fatal(err)
		}
		got := s.scale(storetest.Params(t, tc.capacity, tc.rate))
		if got.Capacity() != tc.wantCapacity || got.Rate().String() != storetest.Params(t, 1, tc.wantRate).Rate().String() {
			t.Errorf("share %v of %d at %s: got %d at %s, want %d at %s", tc.share, tc.capacity, tc.rate,
				got.Capacity(), got.Rate(), tc.wantCapacity, tc.wantRate)
		}
	}
	// A budget stays one, its capacity and debt bound scaled.
	s, err := New(Options{Share: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bucket.NewBudget(1000)
	if err == nil {
		b, err = b.WithMaxDebt(100)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := s.scale(b); got.Refills() || got.Capacity() != 250 || got.MaxDebt() != 25 {
		t.Errorf("a quarter of a budget of 1000 (debt 100): %d at %s, debt %d; want a budget of 250, debt 25", got.Capacity(), got.Rate(), got.MaxDebt())
	}
	for _, bad := range []float64{-1, 1.5} {
		if _, err := New(Options{Share: bad}); err == nil {
			t.Errorf("share %v accepted", bad)
		}
	}
}

// TestConformance: with the whole share the local budget is a store like
// any other.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := New(Options{Share: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestFollowsLineage: a rule change reaches the local bucket as a version
// transition (here a scale from 10 to 20 of which the local half is 5 to
// 10), not as a fresh bucket.
func TestFollowsLineage(t *testing.T) {
	s, _ := New(Options{Share: 0.5})
	v1 := bucket.NewVersion(1, storetest.Params(t, 10, "1/h"), 0)
	v1.Lineage().Publish(v1)
	res := make([]store.Result, 1)
	s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "k", Version: v1, Cost: 4}}}, res)
	v2 := v1.Next(2, storetest.Params(t, 20, "1/h"), int64(time.Second), bucket.Scale)
	v2.Lineage().Publish(v2)
	s.Decide(context.Background(), &store.Request{Now: int64(time.Second), Items: []store.Item{{Key: "k", Version: v2}}}, res)
	if res[0].Remaining != 2 {
		t.Fatalf("1 of 5 scaled to 10: %d, want 2", res[0].Remaining)
	}
}

// endAt is a horizon ending every bucket at the instant e.
type endAt int64

func (e endAt) End(int64) int64 { return int64(e) }

// TestBudget: a calendar budget's local bucket is a budget of the share
// that never refills, and its version carries the rule version's horizon,
// so that the sweep expires it as it expires the rule's own buckets.
func TestBudget(t *testing.T) {
	s, _ := New(Options{Share: 0.5})
	p, err := bucket.NewBudget(10)
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(1, p, 0)
	v.Horizon = endAt(int64(time.Hour))
	v.Lineage().Publish(v)
	res := make([]store.Result, 1)
	decide := func(now, cost int64) store.Result {
		t.Helper()
		if _, err := s.Decide(context.Background(), &store.Request{Now: now, Items: []store.Item{{Key: "k", Version: v, Cost: cost}}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := decide(0, 5); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("the local half of 10: %+v", r)
	}
	if r := decide(int64(time.Hour-1), 1); r.Allowed || r.RetryAfter != bucket.MaxDuration {
		t.Fatalf("a budget refills nothing: %+v", r)
	}
	if l := s.version(v); l.Horizon != v.Horizon || l.Params.Refills() {
		t.Fatalf("the local version: horizon %v, refills %v; want the rule's horizon, a budget", l.Horizon, l.Params.Refills())
	}
}
