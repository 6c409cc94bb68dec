package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// runReserve runs the tests of reservations (store.Item.Reserve).
func runReserve(t *testing.T, newStore Factory, sweep func(store.Store, int64)) {
	runEach(t, newStore, []namedTest{
		{"reserve holds", testReserveHolds},
		{"reserve settles", testReserveSettles},
		{"reserve retried", testReserveRetried},
		{"reserve expires", testReserveExpires},
		{"reserve in one request", testReserveOneRequest},
		{"reserve concurrent", testReserveConcurrent},
	})
	t.Run("reserve model", func(t *testing.T) { testReserveModel(t, newStore, sweep) })
}

// reserveTTL is the reservations' lifetime in these tests.
const reserveTTL = 10 * sec

func reserve(key string, v *bucket.Version, n int64) store.Item {
	return store.Item{Key: key, Version: v, Charge: store.Check, Reserve: n, ReserveTTL: reserveTTL}
}

// testReserveHolds: a check is covered only while its reservation's tokens
// are there, and takes them at once, so three checks of 40 cannot all pass
// on 100; the one refused waits until 40 are back.
func testReserveHolds(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	for i, want := range []int64{60, 20} {
		if out, res := call(t, s, 0, fmt.Sprint("r", i), reserve("u", v, 40)); !out.Allowed || res[0].Remaining != want {
			t.Fatalf("check %d reserving 40: %+v %+v, want %d left", i, out, res[0], want)
		}
	}
	out, res := call(t, s, 0, "r2", reserve("u", v, 40))
	if out.Allowed || res[0].Remaining != 20 || res[0].RetryAfter != 20*3600*sec {
		t.Fatalf("a third check reserving 40 of 20: %+v %+v, want refused until 20 more", out, res[0])
	}
	if a, _ := balance(t, s, 0, "u", v); a != 20 {
		t.Fatalf("a refused reservation took tokens: %d left, want 20", a)
	}
	// The refused check holds nothing: its report is a plain one.
	if _, res := call(t, s, 0, "r2", report("u", v, 5)); res[0].Remaining != 15 {
		t.Fatalf("the report of a refused reservation: %+v, want 5 charged", res[0])
	}
}

// testReserveSettles: the report with the check's id is charged its cost
// less the reservation (a refund when it used less), down to -max_debt with
// the rest forgiven; a second report of the id with another cost is not
// swallowed (a plain report).
func testReserveSettles(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 30)
	call(t, s, 0, "a", reserve("u", v, 40))
	call(t, s, 0, "b", reserve("u", v, 40)) // 20 left
	if out, res := call(t, s, 0, "a", report("u", v, 10)); !out.Allowed || out.Replayed || res[0].Remaining != 50 {
		t.Fatalf("report of 10 on a reservation of 40: %+v %+v, want 30 refunded", out, res[0])
	}
	if _, res := call(t, s, 0, "b", report("u", v, 100)); res[0].Allowed || res[0].Debt != 10 || res[0].Forgiven != 0 {
		t.Fatalf("report of 100 on a reservation of 40: %+v, want 60 more charged, debt 10", res[0])
	}
	if out, res := call(t, s, 0, "a", report("u", v, 25)); out.Replayed || res[0].Debt != 30 || res[0].Forgiven != 5 {
		t.Fatalf("a second report of one id, another cost: %+v %+v, want it charged to -30, 5 forgiven", out, res[0])
	}
	// A settlement beyond the debt bound forgives the rest too.
	w := PostPaidVersion(t, 2, 10, "1/h", 5)
	call(t, s, 0, "c", reserve("w", w, 10))
	if _, res := call(t, s, 0, "c", report("w", w, 30)); res[0].Debt != 5 || res[0].Forgiven != 15 {
		t.Fatalf("report of 30 on a reservation of 10 with 0 left and a bound of 5: %+v", res[0])
	}
	// A refund is capped at capacity, as any refund is.
	call(t, s, 0, "d", reserve("x", w, 4))
	call(t, s, 0, "", report("x", w, -20)) // full again
	if _, res := call(t, s, 0, "d", report("x", w, 1)); res[0].Remaining != 10 {
		t.Fatalf("a refund of 3 on a full bucket: %+v, want 10", res[0])
	}
}

// testReserveRetried: a retried check replays its answer, and past
// store.MaxReplays is decided anew without reserving again; a retried
// report replays, and past MaxReplays is charged as a plain report, never
// settling twice.
func testReserveRetried(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	for i := range store.MaxReplays + 2 {
		out, res := call(t, s, 0, "r", reserve("u", v, 40))
		if !out.Allowed || out.Replayed != (i > 0 && i <= store.MaxReplays) || res[0].Remaining != 60 {
			t.Fatalf("check number %d: %+v %+v, want 60 left (reserved once)", i+1, out, res[0])
		}
	}
	if a, _ := balance(t, s, 0, "u", v); a != 60 {
		t.Fatalf("a retried check reserved again: %d left, want 60", a)
	}
	for i := range store.MaxReplays + 1 {
		if out, res := call(t, s, 0, "r", report("u", v, 50)); out.Replayed != (i > 0) || res[0].Remaining != 50 {
			t.Fatalf("report number %d: %+v %+v, want 10 more charged once", i+1, out, res[0])
		}
	}
	if out, res := call(t, s, 0, "r", report("u", v, 50)); out.Replayed || res[0].Remaining != 0 {
		t.Fatalf("report past MaxReplays: %+v %+v, want 50 charged as a plain report", out, res[0])
	}
}

// testReserveExpires: a reservation never settled comes back whole at its
// expiry, not a nanosecond before, capped at capacity; the id's report is
// then a plain one.
func testReserveExpires(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	call(t, s, 0, "a", reserve("u", v, 30))
	if a, _ := balance(t, s, reserveTTL-1, "u", v); a != 70 {
		t.Fatalf("a nanosecond before its expiry: %d left, want 70", a)
	}
	if a, _ := balance(t, s, reserveTTL, "u", v); a != 100 {
		t.Fatalf("at its expiry: %d left, want the 30 back", a)
	}
	if _, res := call(t, s, reserveTTL, "a", report("u", v, 20)); res[0].Remaining != 80 {
		t.Fatalf("a report after its reservation expired: %+v, want 20 charged", res[0])
	}
	// Returned as a refund is: a bucket refilled meanwhile is capped.
	call(t, s, 0, "b", reserve("w", v, 30))
	call(t, s, 0, "", report("w", v, -50))
	if a, _ := balance(t, s, reserveTTL+sec, "w", v); a != 100 {
		t.Fatalf("an expired reservation on a full bucket: %d, want 100", a)
	}
	// A bucket in debt at the expiry is repaid by it, refill counted up to
	// the expiry first: 1 token a second.
	f := PostPaidVersion(t, 2, 10, "1/s", 50)
	call(t, s, 0, "c", reserve("f", f, 10))
	call(t, s, 0, "", report("f", f, 30)) // -30
	if _, res := call(t, s, reserveTTL+2*sec, "", check("f", f)); res[0].Debt != 8 || res[0].Remaining != 0 {
		t.Fatalf("debt 30, 12 tokens of refill, 10 returned: %+v, want debt 8", res[0])
	}
}

// testReserveOneRequest: one id reserves a bucket once, even twice in one
// request; a request refused by another item reserves nothing.
func testReserveOneRequest(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	pre := Version(t, 2, 5, "1/h")
	out, res := call(t, s, 0, "a", reserve("u", v, 30), reserve("u", v, 30))
	if !out.Allowed || res[0].Remaining != 70 || res[1].Remaining != 70 {
		t.Fatalf("two reservations of one id and bucket: %+v %+v, want one", out, res)
	}
	out, res = call(t, s, 0, "b", reserve("u", v, 30), store.Item{Key: "p", Version: pre, Cost: 6})
	if out.Allowed || !res[0].Allowed || res[0].Remaining != 70 {
		t.Fatalf("a reservation in a refused request: %+v %+v", out, res)
	}
	if _, res := call(t, s, 0, "b", report("u", v, 10)); res[0].Remaining != 60 {
		t.Fatalf("the report of a refused request's reservation: %+v, want a plain report", res[0])
	}
	if _, res := call(t, s, 0, "a", report("u", v, 10)); res[0].Remaining != 80 {
		t.Fatalf("the report of the reservation: %+v, want 20 refunded", res[0])
	}
}

// testReserveConcurrent: many concurrent checks, each reserving 10 of a
// balance of 100 that does not refill, admit exactly 10 of them.
func testReserveConcurrent(t *testing.T, s store.Store) {
	const workers = 32
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := []store.Item{reserve("hot", v, 10)}
			res := make([]store.Result, 1)
			out, err := s.Decide(context.Background(), &store.Request{Now: 0, ID: fmt.Sprint("w", w), Items: items}, res)
			if err != nil {
				t.Error(err)
				return
			}
			if out.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Fatalf("%d of %d checks reserving 10 of 100 admitted, want 10", got, workers)
	}
	if a, _ := balance(t, s, 0, "hot", v); a != 0 {
		t.Fatalf("%d left after 10 reservations of 10, want 0", a)
	}
}
