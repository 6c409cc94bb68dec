package memory

import (
	"context"
	"strconv"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

func reserveItem(key string, v *bucket.Version, n, ttl int64) store.Item {
	return store.Item{Key: key, Version: v, Charge: store.Check, Reserve: n, ReserveTTL: ttl}
}

// tokens reads a bucket's balance with a pre-paid item of cost 0.
func tokens(t *testing.T, s *Store, now int64, key string, v *bucket.Version) int64 {
	t.Helper()
	res := make([]store.Result, 1)
	if _, err := s.Decide(context.Background(), &store.Request{Now: now, Items: []store.Item{{Key: key, Version: v}}}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

// TestSweepReturnsReservations: the janitor returns an expired reservation
// at its expiry, under the bucket's version, though nothing decides the
// bucket, and forgets it; one not yet expired stays.
func TestSweepReturnsReservations(t *testing.T) {
	s := New(Options{Shards: 4})
	v := storetest.PostPaidVersion(t, 1, 10, "1/s", 10)
	decide(t, s, 0, "a", reserveItem("k", v, 6, 5*sec))
	decide(t, s, 0, "b", reserveItem("k", v, 4, 20*sec)) // 0 left
	decide(t, s, 0, "", store.Item{Key: "k", Version: v, Charge: store.Report, Cost: 8})
	s.Sweep(7 * sec)
	st := s.Stats()
	if st.Reservations != 1 || st.HoldsExpired != 1 {
		t.Fatalf("after the sweep at 7s: %+v, want 1 reservation held and 1 returned", st)
	}
	// -8, refilled to 5s (-3), 6 returned (3), refilled to 7s: 5.
	if got := tokens(t, s, 7*sec, "k", v); got != 5 {
		t.Fatalf("balance at 7s: %d, want 5", got)
	}
	// The bucket is full at 12s but still owes a reservation: kept.
	if n := s.Sweep(12 * sec); n != 0 || s.Stats().Buckets != 1 {
		t.Fatalf("swept %d buckets at 12s (%+v), want the bucket with a reservation kept", n, s.Stats())
	}
	if n := s.Sweep(21 * sec); n != 1 || s.Stats().Reservations != 0 {
		t.Fatalf("swept %d at 21s (%+v), want the reservation returned and the full bucket dropped", n, s.Stats())
	}
}

// TestReservationsBounded: past MaxReservations a check is covered as its
// reservation would be and holds nothing, counted; its report is a plain
// report. Settled and expired reservations make room again.
func TestReservationsBounded(t *testing.T) {
	s := New(Options{MaxReservations: 2})
	v := storetest.PostPaidVersion(t, 1, 100, "1/h", 100)
	for i := range 2 {
		decide(t, s, 0, strconv.Itoa(i), reserveItem("k", v, 10, sec))
	}
	if out := decide(t, s, 0, "x", reserveItem("k", v, 10, sec)); !out.Allowed || tokens(t, s, 0, "k", v) != 80 {
		t.Fatalf("a third reservation past the cap of 2: %+v, %d left, want covered, nothing held", out, tokens(t, s, 0, "k", v))
	}
	if out := decide(t, s, 0, "y", reserveItem("k", v, 81, sec)); out.Allowed {
		t.Fatal("past the cap, a check of 81 on 80 was covered")
	}
	if st := s.Stats(); st.Reservations != 2 || st.HoldsRefused != 2 {
		t.Fatalf("stats: %+v, want 2 held, 2 refused", st)
	}
	decide(t, s, 0, "x", store.Item{Key: "k", Version: v, Charge: store.Report, Cost: 5})
	if got := tokens(t, s, 0, "k", v); got != 75 {
		t.Fatalf("the report of an unheld check: %d left, want 5 charged", got)
	}
	decide(t, s, 0, "0", store.Item{Key: "k", Version: v, Charge: store.Report, Cost: 10})
	decide(t, s, 0, "z", reserveItem("k", v, 10, sec)) // room again
	if st := s.Stats(); st.Reservations != 2 || st.HoldsRefused != 2 {
		t.Fatalf("after a settlement: %+v, want the room taken again", st)
	}
}

// TestEvictionDropsReservations: a bucket evicted at the cap goes with its
// reservations, and nothing of them comes back to its next bucket.
func TestEvictionDropsReservations(t *testing.T) {
	s := New(Options{Shards: 1, MaxBuckets: 1})
	v := storetest.PostPaidVersion(t, 1, 10, "1/h", 10)
	decide(t, s, 0, "a", reserveItem("old", v, 4, sec))
	decide(t, s, 1, "", store.Item{Key: "new", Version: v, Cost: 1}) // evicts old
	if st := s.Stats(); st.Reservations != 0 || st.HoldsDropped != 1 || st.Dropped[Idle] != 1 {
		t.Fatalf("stats after the eviction: %+v", st)
	}
	decide(t, s, 2, "", store.Item{Key: "old", Version: v, Cost: 3})
	if got := tokens(t, s, 2*sec, "old", v); got != 7 {
		t.Fatalf("the evicted bucket's next bucket: %d, want 7 (nothing returned)", got)
	}
}
