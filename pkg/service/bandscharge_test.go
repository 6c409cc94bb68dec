package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// Bands with the other ways a rule charges: every hit, and post-paid
// checks that reserve.

// TestBandsEveryHit: on a rule charged every hit, every band is charged
// each cost as a report, refused or not, each down to its own max_debt
// (default its capacity), and the band below zero decides the answer.
func TestBandsEveryHit(t *testing.T) {
	f := newBandsFixture(t)
	perMinute := func(n uint32) string {
		return (&rlsv3.RateLimitResponse_RateLimit{Name: "hits", RequestsPerUnit: n, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}).String()
	}
	for _, step := range []struct {
		at        time.Duration
		cost      uint64
		code      rlsv3.RateLimitResponse_Code
		limit     string
		retry     string
		debt      float64 // the metadata's: the deciding band's
		b0, b1    int64   // the bands' balances after (negative: debt)
		forgiven  float64 // tokengate_forgiven_tokens_total after
		remaining uint32
	}{
		{0, 8, ok, perMinute(10), "", 0, 2, 22, 0, 2},
		// The first band goes to -6 and refuses; the second, which
		// covered it, is charged all the same.
		{0, 8, over, perMinute(10), "42", 6, -6, 14, 0, 0},
		// hits_addend 0 charges nothing and is refused while in debt: 7
		// tokens at 10/m until a hit of 1 fits.
		{0, 0, over, perMinute(10), "42", 6, -6, 14, 0, 0},
		// A minute later (4 and 15), 20 takes the first band to its bound
		// -10 (6 forgiven) and the second to -5, whose 6 tokens at 1/m are
		// the longer wait: it decides.
		{time.Minute, 20, over, perMinute(1), "360", 5, -10, -5, 6, 0},
	} {
		f.clk.Set(int64(step.at))
		r := f.call(t, 0, hits(descr("org", "o"), step.cost))
		st := r.Statuses[0]
		md := r.DynamicMetadata.GetFields()
		if r.OverallCode != step.code || st.CurrentLimit.String() != step.limit || header(r, HeaderRetryAfter) != step.retry ||
			md[MetaDebt].GetNumberValue() != step.debt || st.LimitRemaining != step.remaining {
			t.Fatalf("at %v cost %d: %v, limit %v, retry-after %q, debt %v, remaining %d; want %v, %s, %q, %v, %d",
				step.at, step.cost, r.OverallCode, st.CurrentLimit, header(r, HeaderRetryAfter), md[MetaDebt].GetNumberValue(), st.LimitRemaining,
				step.code, step.limit, step.retry, step.debt, step.remaining)
		}
		for band, want := range []int64{step.b0, step.b1} {
			res := f.bandResult(t, "hits", band, "org", "o")
			if got := res.Remaining - res.Debt; got != want {
				t.Fatalf("at %v cost %d: band %d holds %d, want %d", step.at, step.cost, band, got, want)
			}
		}
		if got := testutil.ToFloat64(f.m.Forgiven.WithLabelValues("edge", "hits")); got != step.forgiven {
			t.Fatalf("at %v: %v forgiven, want %v", step.at, got, step.forgiven)
		}
	}
}

// TestBandsReserve: a check of a reserve rule of several bands holds the
// reserve on every band or, when one cannot hold it, on none; its report
// settles each band's reservation apart.
func TestBandsReserve(t *testing.T) {
	f := newBandsFixture(t)
	balances := func(what string, want0, want1 int64, held int) {
		t.Helper()
		if b0, b1 := f.balance(t, "held", 0, "project", "p"), f.balance(t, "held", 1, "project", "p"); b0 != want0 || b1 != want1 {
			t.Fatalf("%s: the bands hold %d and %d, want %d and %d", what, b0, b1, want0, want1)
		}
		if n := f.store.(*memory.Store).Stats().Reservations; n != held {
			t.Fatalf("%s: %d reservations held, want %d", what, n, held)
		}
	}
	check := hits(descr("project", "p"), 0)
	if r := f.call(t, 0, withID("a", check)...); r.OverallCode != ok || r.Statuses[1].LimitRemaining != 10 {
		t.Fatalf("check a: %v, want OK with 10 left on the second band", r)
	}
	balances("a holds 40 on each", 60, 10, 2)
	// The second band lacks 30 of 40 (36 minutes at 50/h): b is refused
	// and holds nothing on the first band either.
	r := f.call(t, 0, withID("b", check)...)
	if r.OverallCode != over || header(r, HeaderRetryAfter) != "2160" {
		t.Fatalf("check b: %v, retry-after %q, want OVER_LIMIT, 2160", r.OverallCode, header(r, HeaderRetryAfter))
	}
	balances("b refused", 60, 10, 2)
	// a's report of 10 settles each band: 30 back on each.
	if r := f.call(t, 0, withID("a", hits(descr("project", "p"), 10))...); r.OverallCode != ok || r.Statuses[1].LimitRemaining != 40 {
		t.Fatalf("report a: %v, want OK with 40 left", r)
	}
	balances("a settled", 90, 40, 0)
	// b held nothing, so its report is a plain one on both bands.
	f.call(t, 0, withID("b", hits(descr("project", "p"), 10))...)
	balances("b reported", 80, 30, 0)
}

// TestBandsReserveLocal: while the store fails, a reserve rule of several
// bands (on_store_error local, the default) decides its checks from the
// local budget, a half of each band, holding nothing on any band: that
// decision has no request id, so no report could settle a reservation.
func TestBandsReserveLocal(t *testing.T) {
	svc, flaky, _ := flakyService(t, "bands.yaml", bandsPolicy)
	flaky.fail = true
	for i := range 3 {
		r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withID(fmt.Sprint("l", i), hits(descr("project", "p"), 0))})
		if err != nil {
			t.Fatal(err)
		}
		// 25 of the second band's 50 is the fewest left, and stays: a
		// check that held 40 would leave none of it.
		if r.OverallCode != ok || !degradedOf(r) || r.Statuses[1].LimitRemaining != 25 {
			t.Fatalf("local check %d: %v, want OK, degraded, 25 left", i, r)
		}
	}
}

// TestBandsStopWhenOver: a stop_when_over descriptor of several bands goes
// over when any band cannot cover its cost, and is then counted on every
// band, as every_hit charges them; while it fits it is charged as any.
func TestBandsStopWhenOver(t *testing.T) {
	f := newFixtureWith(t, `
domains:
  edge:
    - name: stops
      match: [{key: team}]
      charge: stop_when_over
      limits:
        - {capacity: 10, refill: 10/m}
        - {capacity: 30, refill: 1/m}
`, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
	for _, step := range []struct {
		cost   uint64
		code   rlsv3.RateLimitResponse_Code
		b0, b1 int64 // the bands' balances after (negative: debt)
	}{
		{8, ok, 2, 22},
		// The first band cannot cover 8: the descriptor goes over and is
		// counted on both bands, the second's 22 included.
		{8, over, -6, 14},
		// A cost of 0 charges nothing and is refused while in debt.
		{0, over, -6, 14},
	} {
		if r := f.call(t, 0, hits(descr("team", "a"), step.cost)); r.OverallCode != step.code {
			t.Fatalf("cost %d: %v, want %v", step.cost, r.OverallCode, step.code)
		}
		for band, want := range []int64{step.b0, step.b1} {
			res := f.bandResult(t, "stops", band, "team", "a")
			if got := res.Remaining - res.Debt; got != want {
				t.Fatalf("cost %d: band %d holds %d, want %d", step.cost, band, got, want)
			}
		}
	}
}
