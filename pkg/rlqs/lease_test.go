package rlqs

import (
	"math"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/bucket"
)

func TestFillOf(t *testing.T) {
	for _, tc := range []struct {
		rate    string
		seconds int64
		tokens  int64
	}{
		{"10/s", 1, 10},
		{"1/s", 1, 1},
		{"600/m", 1, 10},
		{"1/m", 60, 1},
		{"7/3s", 1, 2},
		{"1/1500ms", 2, 1},
		{"100000000000/s", 1, math.MaxUint32},
	} {
		r, err := bucket.ParseRate(tc.rate)
		if err != nil {
			t.Fatal(err)
		}
		f := fillOf(r, 1)
		if f.interval != tc.seconds*int64(time.Second) || f.tokens != tc.tokens {
			t.Errorf("fillOf(%s) = %d tokens per %v, want %d per %ds", tc.rate, f.tokens, time.Duration(f.interval), tc.tokens, tc.seconds)
		}
	}
}

// TestFillIsTheRate: the fill never gives more than the rule's rate, and
// is its whole requests of unit tokens in the interval (below the
// token_bucket cap).
func TestFillIsTheRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 1<<40).Draw(t, "n")
		per := time.Duration(rapid.Int64Range(1, int64(24*time.Hour)).Draw(t, "per"))
		r, err := bucket.NewRate(n, per)
		if err != nil {
			t.Skip(err)
		}
		unit := rapid.Int64Range(1, 1000).Draw(t, "unit")
		f := fillOf(r, unit)
		perRequest := new(big.Rat).Mul(big.NewRat(r.Tokens(), int64(r.Per())), big.NewRat(1, unit))
		exact := new(big.Rat).Mul(perRequest, new(big.Rat).SetInt64(f.interval))
		floor := new(big.Int).Quo(exact.Num(), exact.Denom())
		if f.interval%int64(time.Second) != 0 || f.tokens < 1 {
			t.Fatalf("fill %+v of %v", f, r)
		}
		want := min(floor.Int64(), math.MaxUint32)
		if !floor.IsInt64() {
			want = math.MaxUint32
		}
		if f.tokens != want {
			t.Fatalf("fill of %v: %d tokens per %v, want %d", r, f.tokens, time.Duration(f.interval), want)
		}
		if f.interval > int64(time.Second) && new(big.Rat).Mul(perRequest, new(big.Rat).SetInt64(f.interval-int64(time.Second))).Cmp(big.NewRat(1, 1)) >= 0 {
			t.Fatalf("fill of %v: %v is not the shortest interval", r, time.Duration(f.interval))
		}
	})
}

// TestShares: the targets of a bucket's streams sum to at most its
// tokens, each gets its floor, and more demand never gets less.
func TestShares(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.Int64Range(1, math.MaxUint32).Draw(t, "total")
		weights := rapid.SliceOfN(rapid.Int64Range(0, maxWeight), 1, 64).Draw(t, "weights")
		n := int64(len(weights))
		var sum int64
		for i, w := range weights {
			got := share(total, weights, i)
			sum += got
			if total >= n && got < max(1, total/(4*n)) {
				t.Fatalf("stream %d of %d gets %d of %d, under its floor", i, n, got, total)
			}
			for j, o := range weights {
				if o > w && share(total, weights, j) < got {
					t.Fatalf("demand %d gets less than demand %d", o, w)
				}
			}
		}
		if sum > total {
			t.Fatalf("shares sum to %d, more than %d", sum, total)
		}
	})
}

// TestLeaseCoversWhatItPaid: after paying rateCost(until), the lease covers
// until, and Envoy's most spending up to any instant it covers,
// m + k*(x-start)/interval, is at most what was paid.
func TestLeaseCoversWhatItPaid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := fill{interval: rapid.Int64Range(1, 3600).Draw(t, "seconds") * int64(time.Second), tokens: math.MaxUint32, unit: 1}
		l := lease{k: rapid.Int64Range(1, math.MaxUint32).Draw(t, "k"), start: rapid.Int64Range(0, 1<<50).Draw(t, "start")}
		l.m = l.k
		until := l.start
		for _, step := range rapid.SliceOfN(rapid.Int64Range(0, int64(time.Hour)), 1, 20).Draw(t, "steps") {
			until += step
			l.paidRate += l.rateCost(f, until)
			if c := l.covered(f); c < until {
				t.Fatalf("paid %d, covers %d, short of %d", l.paidRate, c, until)
			}
			// Envoy's spending to covered() is within what was paid.
			spend := new(big.Rat).Mul(big.NewRat(l.k, f.interval), new(big.Rat).SetInt64(l.covered(f)-l.start))
			if spend.Cmp(new(big.Rat).SetInt64(l.paidRate)) > 0 {
				t.Fatalf("covers a refill of %v, paid %d", spend, l.paidRate)
			}
			if l.rateCost(f, until) != 0 {
				t.Fatal("paying twice for one instant")
			}
		}
	})
}

// TestAffordable: the lease affordable() returns costs at most the tokens
// there are, and one more token per fill would not.
func TestAffordable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := fill{interval: rapid.Int64Range(1, 60).Draw(t, "seconds") * int64(time.Second), tokens: math.MaxUint32, unit: 1}
		tokens := rapid.Int64Range(0, 1<<40).Draw(t, "tokens")
		ahead := rapid.Int64Range(0, int64(time.Minute)).Draw(t, "ahead")
		target := rapid.Int64Range(1, math.MaxUint32).Draw(t, "target")
		cost := func(k int64) int64 {
			l := lease{k: k, m: k}
			return k + l.rateCost(f, ahead)
		}
		k := affordable(f, tokens, ahead, target)
		if k > target || (k > 0 && cost(k) > tokens) {
			t.Fatalf("affordable(%d tokens) = %d costing %d", tokens, k, cost(k))
		}
		if k < target && cost(k+1)+1 < tokens {
			t.Fatalf("affordable(%d tokens) = %d, but %d costs only %d", tokens, k, k+1, cost(k+1))
		}
	})
}
