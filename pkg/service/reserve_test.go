package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const reservePolicy = `
request_id_key: request_id
domains:
  edge:
    - name: tokens
      match: [{key: user_id}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
      max_debt: 500
      reserve: 400
      reserve_ttl: 1m
    - name: per-ip
      match: [{key: ip}]
      capacity: 2
      refill: 1/h
    - name: quota-ip
      match: [{key: ip}, {key: plan}]
      capacity: 1
      refill: 1/h
      quota: true
`

func newReserveFixture(t testing.TB, tweak func(*Options)) *fixture {
	t.Helper()
	return newFixtureWith(t, reservePolicy, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, tweak)
}

// withID is ds with the request id descriptor id first.
func withID(id string, ds ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
	return append([]*ratelimitv3.RateLimitDescriptor{descr("request_id", id)}, ds...)
}

func userCheck() *ratelimitv3.RateLimitDescriptor { return hits(descr("user_id", "u"), 0) }

// TestReserveHoldsAndSettles: checks hold 400 each for their request id,
// the third is refused until 400 are there, and each report settles its
// own reservation exactly: a refund for less, an extra charge for more.
func TestReserveHoldsAndSettles(t *testing.T) {
	f := newReserveFixture(t, nil)
	for i, want := range []uint32{600, 200} {
		if r := f.call(t, 0, withID(fmt.Sprint("r", i), userCheck())...); r.OverallCode != ok || r.Statuses[1].LimitRemaining != want {
			t.Fatalf("check %d: %v, want %d left after its reservation", i, r, want)
		}
	}
	r := f.call(t, 0, withID("r2", userCheck())...)
	md := r.DynamicMetadata.GetFields()
	// 200 more at 1000/h: 12 minutes.
	if r.OverallCode != over || r.Statuses[1].LimitRemaining != 200 || header(r, HeaderRetryAfter) != "720" || md[MetaRemaining].GetNumberValue() != 200 {
		t.Fatalf("a third check, 200 left: %v", r)
	}
	if r := f.call(t, 0, withID("r0", hits(descr("user_id", "u"), 100))...); r.OverallCode != ok || r.Statuses[1].LimitRemaining != 500 {
		t.Fatalf("report of 100 on 400 held: %v, want 300 refunded", r)
	}
	r = f.call(t, 0, withID("r1", hits(descr("user_id", "u"), 1300))...)
	if r.OverallCode != over || r.Statuses[1].LimitRemaining != 0 || r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 400 {
		t.Fatalf("report of 1300 on 400 held: %v, want 900 more charged (debt 400)", r)
	}
	// The debt bound holds on a settlement: 500 more of 400 held, 400
	// into the 100 left of the bound, the rest forgiven.
	f.clk.Add(2 * time.Hour) // full again
	f.call(t, 0, withID("r3", userCheck())...)
	r = f.call(t, 0, withID("r3", hits(descr("user_id", "u"), 2000))...)
	if r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 500 || testutil.ToFloat64(f.m.Forgiven.WithLabelValues("edge", "tokens")) != 500 {
		t.Fatalf("report of 2000 on 400 held, 600 left, bound 500: %v", r)
	}
}

// TestReserveLimitHeaders: the limit headers show the balance after the
// reservation.
func TestReserveLimitHeaders(t *testing.T) {
	f := newReserveFixture(t, func(o *Options) {
		o.LimitHeaders = &LimitHeaders{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	})
	if r := f.call(t, 0, withID("a", userCheck())...); header(r, "RateLimit-Remaining") != "600" {
		t.Fatalf("headers after a reservation of 400: %v", r.ResponseHeadersToAdd)
	}
}

// TestReserveConcurrent: concurrent checks on one balance, each with its
// own request id, cannot all pass: 1000 holds two reservations of 400.
func TestReserveConcurrent(t *testing.T) {
	f := newReserveFixture(t, nil)
	const workers = 16
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withID(fmt.Sprint("w", w), userCheck())})
			if err != nil {
				t.Error(err)
				return
			}
			if resp.OverallCode == ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 2 {
		t.Fatalf("%d of %d concurrent checks admitted, want 2 (400 each of 1000)", got, workers)
	}
	if got := f.call(t, 0, descr("user_id", "u")).Statuses[0].LimitRemaining; got != 200 {
		t.Fatalf("%d left after the concurrent checks, want 200", got)
	}
}

// TestReserveTTL: a reservation never settled comes back after
// reserve_ttl, exactly, and its late report is then a plain one.
func TestReserveTTL(t *testing.T) {
	f := newReserveFixture(t, nil)
	f.call(t, 0, withID("a", userCheck())...)
	f.clk.Add(time.Minute - time.Nanosecond)
	// 16 tokens of refill (1000/h for a minute, less a nanosecond).
	if got := f.call(t, 0, descr("user_id", "u")).Statuses[0].LimitRemaining; got != 616 {
		t.Fatalf("a nanosecond before reserve_ttl: %d, want 616", got)
	}
	f.clk.Add(time.Nanosecond)
	if got := f.call(t, 0, descr("user_id", "u")).Statuses[0].LimitRemaining; got != 1000 {
		t.Fatalf("at reserve_ttl: %d, want the 400 back (capped at 1000)", got)
	}
	if r := f.call(t, 0, withID("a", hits(descr("user_id", "u"), 100))...); r.Statuses[1].LimitRemaining != 900 {
		t.Fatalf("the report after its reservation came back: %v, want 100 charged", r)
	}
}

// TestReserveRetried: a retried check (the same request id) holds its
// tokens once, also past the replays; a retried report settles once.
func TestReserveRetried(t *testing.T) {
	f := newReserveFixture(t, nil)
	for i := range store.MaxReplays + 2 {
		if r := f.call(t, 0, withID("a", userCheck())...); r.OverallCode != ok || r.Statuses[1].LimitRemaining != 600 {
			t.Fatalf("check number %d: %v, want 600 left (held once)", i+1, r)
		}
	}
	for i := range store.MaxReplays + 1 {
		if r := f.call(t, 0, withID("a", hits(descr("user_id", "u"), 500))...); r.Statuses[1].LimitRemaining != 500 {
			t.Fatalf("report number %d: %v, want 100 more charged once", i+1, r)
		}
	}
	if got := f.call(t, 0, descr("user_id", "u")).Statuses[0].LimitRemaining; got != 500 {
		t.Fatalf("after the retries: %d left, want 500", got)
	}
	// The same id reporting another cost is another report: not swallowed.
	if r := f.call(t, 0, withID("a", hits(descr("user_id", "u"), 50))...); r.Statuses[1].LimitRemaining != 450 {
		t.Fatalf("a second report of the id, another cost: %v, want 50 charged", r)
	}
}

// TestReserveWithoutID: a check without a request id holds nothing: a
// plain check, counted.
func TestReserveWithoutID(t *testing.T) {
	f := newReserveFixture(t, nil)
	for range 3 {
		if r := f.call(t, 0, userCheck()); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1000 {
			t.Fatalf("a check without an id: %v, want a plain check", r)
		}
	}
	if n := testutil.ToFloat64(f.m.Unreserved.WithLabelValues("edge", "tokens")); n != 3 {
		t.Fatalf("tokengate_unreserved_checks_total %v, want 3", n)
	}
	f.call(t, 0, withID("a", userCheck())...)
	if n := testutil.ToFloat64(f.m.Unreserved.WithLabelValues("edge", "tokens")); n != 3 {
		t.Fatalf("a check with an id counted as unreserved: %v", n)
	}
}

// TestReserveRefusedRequest: a request refused by another descriptor
// holds nothing, before the store (a value too long) or in it (a spent
// bucket); decided again for its quota descriptors, it holds nothing
// either (that decision's id is not the one its report carries).
func TestReserveRefusedRequest(t *testing.T) {
	f := newReserveFixture(t, nil)
	f.call(t, 0, descr("ip", "1"), descr("ip", "1")) // per-ip spent
	if r := f.call(t, 0, withID("a", userCheck(), descr("ip", "1"))...); r.OverallCode != over || r.Statuses[1].LimitRemaining != 1000 {
		t.Fatalf("a reservation beside a spent bucket: %v", r)
	}
	long := make([]byte, MaxValueBytes+1)
	if r := f.call(t, 0, withID("b", userCheck(), descr("ip", string(long)))...); r.OverallCode != over {
		t.Fatalf("a reservation beside a refused descriptor: %v", r)
	}
	if got := f.call(t, 0, descr("user_id", "u")).Statuses[0].LimitRemaining; got != 1000 {
		t.Fatalf("refused requests held tokens: %d left, want 1000", got)
	}
	f.call(t, 0, descr("ip", "2", "plan", "x")) // quota-ip of 2 spent
	unreserved := func() float64 { return testutil.ToFloat64(f.m.Unreserved.WithLabelValues("edge", "tokens")) }
	before := unreserved() // the balance read above, without an id
	r := f.call(t, 0, withID("c", userCheck(), descr("ip", "3", "plan", "x"), descr("ip", "2", "plan", "x"))...)
	if r.OverallCode != ok || r.Statuses[1].LimitRemaining != 1000 || unreserved() != before+1 {
		t.Fatalf("a check decided again for its quota descriptors: %v (unreserved %v, was %v)", r, unreserved(), before)
	}
}
