package bucket

import (
	"testing"
	"time"
)

const sec = int64(time.Second)

func mustParams(t testing.TB, capacity int64, rate string) Params {
	t.Helper()
	r, err := ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewParams(capacity, r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// step is one decision of a table: at instant `at` ask for `cost` and expect
// the result and the whole tokens left.
type step struct {
	at        int64
	cost      int64
	allowed   bool
	remaining int64
	retry     int64 // expected RetryAfter
	never     bool
}

func TestDecideSteps(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		rate     string
		steps    []step
	}{
		{"full bucket at start", 5, "1/s", []step{
			{at: 0, cost: 5, allowed: true, remaining: 0},
		}},
		{"repeated rejects consume nothing", 2, "1/s", []step{
			{at: 0, cost: 2, allowed: true, remaining: 0},
			{at: sec / 2, cost: 1, remaining: 0, retry: sec / 2},
			{at: sec / 2, cost: 1, remaining: 0, retry: sec / 2},
			{at: sec - 1, cost: 1, remaining: 0, retry: 1},
			{at: sec, cost: 1, allowed: true, remaining: 0},
		}},
		{"exact refill to the token", 10, "7/3s", []step{
			{at: 0, cost: 10, allowed: true},
			// 7 tokens every 3s: 2 tokens after 6/7 s, rounded up to the ns.
			{at: 857142857, cost: 2, remaining: 1, retry: 1},
			{at: 857142858, cost: 2, allowed: true},
			// 3s after the start exactly 7 were added; 2 were spent.
			{at: 3 * sec, cost: 5, allowed: true, remaining: 0},
		}},
		{"cost equal to capacity", 3, "1/s", []step{
			{at: 0, cost: 3, allowed: true},
			{at: 2 * sec, cost: 3, remaining: 2, retry: sec},
			{at: 3 * sec, cost: 3, allowed: true},
		}},
		{"cost above capacity is never affordable", 3, "1/s", []step{
			{at: 0, cost: 4, never: true, remaining: 3},
			{at: 0, cost: 3, allowed: true},
		}},
		{"zero elapsed adds nothing", 2, "1000/s", []step{
			{at: 5, cost: 2, allowed: true},
			{at: 5, cost: 1, retry: int64(time.Millisecond)},
		}},
		{"clock going backwards mints nothing", 2, "1/s", []step{
			{at: 10 * sec, cost: 2, allowed: true},
			{at: 3 * sec, cost: 1, retry: 8 * sec},
			{at: 10*sec + sec/2, cost: 1, retry: sec / 2},
			{at: 11 * sec, cost: 1, allowed: true},
		}},
		{"100-year idle", 1_000_000_000_000, "1/d", []step{
			{at: 0, cost: 1_000_000_000_000, allowed: true},
			{at: 100 * 365 * 24 * int64(time.Hour), cost: 36500, allowed: true, remaining: 0},
			{at: 100 * 365 * 24 * int64(time.Hour), cost: 1, retry: 24 * int64(time.Hour)},
		}},
		{"refund caps at capacity", 10, "1/s", []step{
			{at: 0, cost: 4, allowed: true, remaining: 6},
			{at: 0, cost: -3, allowed: true, remaining: 9},
			{at: 0, cost: -5, allowed: true, remaining: 10},
			{at: 0, cost: -1 << 62, allowed: true, remaining: 10},
		}},
		{"check only consumes nothing", 3, "1/s", []step{
			{at: 0, cost: 0, allowed: true, remaining: 3},
			{at: 0, cost: 3, allowed: true, remaining: 0},
			{at: 0, cost: 0, allowed: true, remaining: 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParams(t, tc.capacity, tc.rate)
			s := p.Full(0)
			for i, st := range tc.steps {
				before := s
				var r Result
				s, r = p.Decide(s, st.at, st.cost)
				if r.Allowed != st.allowed || r.Never != st.never || r.Remaining != st.remaining || r.RetryAfter != st.retry {
					t.Fatalf("step %d (at %d cost %d): got %+v, want allowed=%v never=%v remaining=%d retry=%d",
						i, st.at, st.cost, r, st.allowed, st.never, st.remaining, st.retry)
				}
				if st.never && s != before {
					t.Fatalf("step %d: a never-affordable cost changed the state %+v -> %+v", i, before, s)
				}
				if s.Tokens < 0 || s.Tokens > tc.capacity || s.At < before.At {
					t.Fatalf("step %d: invariant broken: %+v (before %+v)", i, s, before)
				}
			}
		})
	}
}

func TestResetAfter(t *testing.T) {
	p := mustParams(t, 10, "2/s")
	s, _ := p.Decide(p.Full(0), 0, 3)
	if got := p.UntilFull(s, s.At); got != 3*sec/2 {
		t.Fatalf("reset after spending 3 of 10 at 2/s: got %d, want 1.5s", got)
	}
	if got := p.FullAt(s); got != 3*sec/2 {
		t.Fatalf("FullAt: got %d, want 1.5s", got)
	}
	if s, r := p.Decide(s, 2*sec, 0); p.UntilFull(s, s.At) != 0 || r.Remaining != 10 {
		t.Fatalf("full bucket: got %+v", r)
	}
}

func TestExtremesSaturate(t *testing.T) {
	p := mustParams(t, MaxCapacity, "1/366d")
	s, r := p.Decide(p.Full(0), 0, MaxCapacity)
	if !r.Allowed || p.UntilFull(s, s.At) != MaxDuration {
		t.Fatalf("empty 10^15 bucket at 1/366d: got %+v, want reset saturated at MaxDuration", r)
	}
	if got := p.FullAt(s); got != MaxDuration {
		t.Fatalf("FullAt: got %d, want MaxDuration", got)
	}
	// The longest idle an int64 clock can express refills exactly.
	s = p.Refill(State{At: -1 << 63}, 1<<63-1)
	want := int64((uint64(1<<64-1) / uint64(366*24*time.Hour)))
	if s.Tokens != want {
		t.Fatalf("292-year idle: got %d tokens, want %d", s.Tokens, want)
	}
	fast := mustParams(t, MaxCapacity, "1000000000000/ns")
	if s, _ := fast.Decide(fast.Full(0), 0, MaxCapacity); fast.Refill(s, 1<<62).Tokens != MaxCapacity {
		t.Fatal("10^12 tokens/ns did not refill to capacity")
	}
}

func TestNewParamsRefusesOutOfRange(t *testing.T) {
	r, _ := NewRate(1, time.Second)
	for _, c := range []int64{0, -1, MaxCapacity + 1} {
		if _, err := NewParams(c, r); err == nil {
			t.Errorf("capacity %d accepted", c)
		}
	}
	if _, err := NewParams(1, Rate{}); err == nil {
		t.Error("zero rate accepted")
	}
}

func TestZeroParamsNeverAffords(t *testing.T) {
	var p Params
	s, r := p.Decide(State{}, 10, 1)
	if !r.Never || r.Allowed || s != (State{}) {
		t.Fatalf("zero params: got %+v %+v", s, r)
	}
}
