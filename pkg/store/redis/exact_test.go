package redis

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// TestLuaMatchesBucket runs random sequences of decisions and parameter
// changes on one bucket across pkg/bucket's whole validated range
// (capacity up to 10^15, rates up to 10^12 per 1ns..366 days, instants
// anywhere in int64) through the script and through pkg/bucket: every
// balance, retry and reset time must be identical. Parameters and time
// steps are drawn on both sides of the plain-number path's bounds
// (capacity*period around 2^52, steps around 2^52 ns), so both paths and
// the switch between them are compared; the test counts both. Half the
// sequences are post-paid: debt bounds (with (capacity+debt)*period
// around the bound too), checks and reports (of costs up to int64's
// largest, past what a double holds) mixed with pre-paid items, so that
// debts are charged, refilled, forgiven and carried through transitions.
// A fifth of the parameters are budgets (bucket.NewBudget: no refill,
// waits of bucket.MaxDuration), so that transitions to, from and between
// them are compared too; the test counts budget decisions as well.
func TestLuaMatchesBucket(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	seq := 0
	rapid.Check(t, func(rt *rapid.T) {
		// Ten sequences per case: thousands of sequences in all.
		for i := range 10 {
			seq++
			s := newStore(t, c, Options{RequestTime: true, KeyPrefix: fmt.Sprintf("x%d:", seq)})
			checkSequence(rt, s, i%2 == 1)
		}
	})
	t.Logf("decisions by path: plain numbers %d, bignums %d; in debt after %d; budgets %d", paths[0], paths[1], paths[2], paths[3])
	if paths[0] == 0 || paths[1] == 0 || paths[2] == 0 || paths[3] == 0 {
		t.Fatalf("decisions by path (plain numbers, bignums), in debt, budgets: %v; want each", paths)
	}
}

// drawParams draws a bucket's parameters and, postPaid, its debt bound.
func drawParams(rt *rapid.T, postPaid bool) bucket.Params {
	if rapid.IntRange(0, 4).Draw(rt, "budget") == 0 {
		p, err := bucket.NewBudget(rapid.OneOf(rapid.Int64Range(1, 100), rapid.Int64Range(1, bucket.MaxCapacity)).Draw(rt, "capacity"))
		if err != nil {
			rt.Fatal(err)
		}
		return drawDebt(rt, p, postPaid, bucket.MaxDebt-2)
	}
	n := rapid.OneOf(rapid.Int64Range(1, 10), rapid.Int64Range(1, bucket.MaxRateTokens)).Draw(rt, "n")
	per := rapid.OneOf(rapid.SampledFrom([]int64{1, int64(time.Millisecond), int64(time.Second), int64(time.Hour)}),
		rapid.Int64Range(1, bucket.MaxRatePer)).Draw(rt, "per")
	// The reduced period is what the bound applies to: capacities on
	// either side of fastLimit/per for the period as drawn when n = 1.
	edge := min(max(int64(fastLimit)/per, 3), bucket.MaxCapacity-2)
	capacity := rapid.OneOf(rapid.Int64Range(1, 100), rapid.Int64Range(1, bucket.MaxCapacity),
		rapid.Int64Range(edge-2, edge+2)).Draw(rt, "capacity")
	r, err := bucket.NewRate(n, time.Duration(per))
	if err != nil {
		rt.Fatal(err)
	}
	p, err := bucket.NewParams(capacity, r)
	if err != nil {
		rt.Fatal(err)
	}
	// Debts on either side of the bound on (capacity+debt)*period.
	return drawDebt(rt, p, postPaid, min(max(edge-capacity, 2), bucket.MaxDebt-2))
}

// drawDebt is p with, postPaid, a debt bound drawn up to MaxDebt and
// around room.
func drawDebt(rt *rapid.T, p bucket.Params, postPaid bool, room int64) bucket.Params {
	if !postPaid {
		return p
	}
	debt := rapid.OneOf(rapid.Int64Range(0, 100), rapid.Int64Range(0, bucket.MaxDebt),
		rapid.Int64Range(room-2, room+2)).Draw(rt, "debt")
	p, err := p.WithMaxDebt(debt)
	if err != nil {
		rt.Fatal(err)
	}
	return p
}

// paths counts the decisions checkSequence made with parameters that fit
// the plain-number path, and with those that do not, the decisions that
// left a debt, and those of a budget.
var paths [4]int

// checkSequence compares one bucket's sequence through s with pkg/bucket;
// postPaid, its items are checks and reports too, its versions have debt
// bounds. (FuzzLuaMatchesBucket's seeds encode the draws of a pre-paid
// sequence.)
func checkSequence(rt *rapid.T, s *Store, postPaid bool) {
	p := drawParams(rt, postPaid)
	now := rapid.Int64().Draw(rt, "start")
	v := bucket.NewVersion(1, p, now)
	v.Lineage().Publish(v)
	var st bucket.State
	var sv *bucket.Version // the version st was last decided under; nil: no bucket yet
	forgot := int64(minInt64)
	for step := range rapid.IntRange(1, 12).Draw(rt, "steps") {
		dt := rapid.OneOf(rapid.Int64Range(-int64(time.Second), int64(time.Hour)), rapid.Int64Range(0, 1<<62),
			rapid.Int64Range(fastLimit-1<<32, fastLimit+1<<32)).Draw(rt, "dt")
		if now+dt < now == (dt > 0) { // overflow: stay put
			dt = 0
		}
		now += dt
		if rapid.IntRange(0, 4).Draw(rt, "kind") == 0 {
			mode := bucket.ResizeMode(rapid.IntRange(0, 1).Draw(rt, "mode"))
			v = v.Next(v.ID+1, drawParams(rt, postPaid), now, mode)
			v.Lineage().Publish(v)
			continue
		}
		it := drawItem(rt, v, postPaid)
		// The expected answer, as the memory store works it out.
		var refilled bucket.State
		if sv == nil {
			refilled = v.Params.Full(max(now, forgot))
		} else {
			refilled = v.Params.Refill(v.Bring(st, sv), now)
		}
		after, want := it.Charge.Decide(v.Params, refilled, now, it.Cost)
		report := it.Charge == store.Report
		final := after
		if !want.Allowed && !report {
			final = refilled
		}
		wantReset := v.Params.UntilFull(final, now)

		if packFast(v.Params) != "" {
			paths[0]++
		} else {
			paths[1]++
		}
		if final.Tokens < 0 {
			paths[2]++
		}
		if !v.Params.Refills() {
			paths[3]++
		}
		res := make([]store.Result, 1)
		out, err := s.Decide(context.Background(), &store.Request{Now: now, Items: []store.Item{it}}, res)
		if err != nil {
			rt.Fatalf("step %d: %v", step, err)
		}
		// A report is no gate: alone, nothing refuses the request.
		if out.Allowed != (want.Allowed || report) || res[0].Result != want || res[0].ResetAfter != wantReset {
			rt.Fatalf("step %d at %d, params %v/%v debt %d, %+v: got %+v, want %+v reset %d",
				step, now, v.Params.Capacity(), v.Params.Rate(), v.Params.MaxDebt(), it, res[0], want, wantReset)
		}
		if sv == nil && final.Tokens == v.Params.Capacity() {
			forgot = max(forgot, final.At)
			continue
		}
		st, sv = final, v
	}
}

// drawItem draws an item of the bucket "k" under v: pre-paid, or,
// postPaid, also a check or a report (of a cost up to int64's largest).
func drawItem(rt *rapid.T, v *bucket.Version, postPaid bool) store.Item {
	capacity := v.Params.Capacity()
	it := store.Item{Key: "k", Version: v}
	if postPaid {
		it.Charge = store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))
	}
	switch it.Charge {
	case store.Prepaid:
		it.Cost = rapid.OneOf(rapid.Int64Range(-capacity, capacity+1), rapid.Int64Range(0, 3)).Draw(rt, "cost")
	case store.Report:
		room := capacity + v.Params.MaxDebt()
		it.Cost = rapid.OneOf(rapid.Int64Range(-capacity, room+capacity), rapid.Int64Range(0, 3),
			rapid.Int64Range(room-2, room+2), rapid.Int64Range(math.MinInt64, math.MaxInt64)).Draw(rt, "report")
	}
	return it
}
