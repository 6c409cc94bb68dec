package bucket

import (
	"testing"
	"time"
)

// TestPostPaidSteps: checks and reports on a post-paid bucket, step by
// step, with the example first.
func TestPostPaidSteps(t *testing.T) {
	const hour = int64(time.Hour)
	type step struct {
		at              int64
		report          bool // else a check
		cost            int64
		allowed         bool
		remaining, debt int64
		retry, forgiven int64
	}
	cases := []struct {
		name     string
		capacity int64
		rate     string
		debt     int64
		steps    []step
	}{
		{"the issue's table", 1000, "1000/h", 100_000, []step{
			{at: 0, allowed: true, remaining: 1000},
			{at: 0, report: true, cost: 5000, debt: 4000, retry: 4001 * 3600 * int64(time.Millisecond)},
			// 4001 tokens at 1000/h: 4h0m3.6s.
			{at: 0, debt: 4000, retry: 4*hour + 3600*int64(time.Millisecond)},
			{at: 4 * hour, debt: 0, retry: 3600 * int64(time.Millisecond)},
			{at: 4*hour + 3600*int64(time.Millisecond), allowed: true, remaining: 1},
		}},
		{"a report beyond the bound is forgiven", 10, "1/s", 5, []step{
			{at: 0, report: true, cost: 30, debt: 5, forgiven: 15, retry: 6 * sec},
			{at: 0, report: true, cost: 1, debt: 5, forgiven: 1, retry: 6 * sec},
			{at: sec / 2, report: true, cost: 1, debt: 5, forgiven: 1, retry: 11 * sec / 2},
		}},
		{"debt bound 0 floors at zero", 10, "1/s", 0, []step{
			{at: 0, report: true, cost: 25, allowed: true, forgiven: 15},
			{at: 0, retry: sec},
			{at: sec, allowed: true, remaining: 1},
		}},
		{"a report that stays at zero or above is OK", 10, "1/s", 100, []step{
			{at: 0, report: true, cost: 10, allowed: true},
			{at: 0, retry: sec},
		}},
		{"a refund repays a debt", 10, "1/s", 100, []step{
			{at: 0, report: true, cost: 30, debt: 20, retry: 21 * sec},
			{at: 0, report: true, cost: -25, allowed: true, remaining: 5},
			{at: 0, report: true, cost: -1 << 62, allowed: true, remaining: 10},
		}},
		{"a fraction of a token of debt", 2, "2/s", 10, []step{
			{at: 0, report: true, cost: 5, debt: 3, retry: 2 * sec},
			{at: sec / 4, debt: 3, retry: 7 * sec / 4}, // -2.5: Tokens -3
			{at: sec + sec/4, debt: 1, retry: 3 * sec / 4},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := mustParams(t, tc.capacity, tc.rate).WithMaxDebt(tc.debt)
			if err != nil {
				t.Fatal(err)
			}
			s := p.Full(0)
			for i, st := range tc.steps {
				var r Result
				before := s
				if st.report {
					s, r = p.Report(s, st.at, st.cost)
				} else {
					s, r = p.Check(s, st.at)
					if p.Refill(before, st.at) != s {
						t.Fatalf("step %d: a check changed the balance: %+v -> %+v", i, before, s)
					}
				}
				want := Result{Allowed: st.allowed, Remaining: st.remaining, RetryAfter: st.retry, Debt: st.debt, Forgiven: st.forgiven}
				if r != want {
					t.Fatalf("step %d (at %d report %v cost %d): got %+v, want %+v", i, st.at, st.report, st.cost, r, want)
				}
				if s.Tokens < -tc.debt || s.Tokens > tc.capacity {
					t.Fatalf("step %d: balance out of bounds: %+v", i, s)
				}
			}
		})
	}
}

func TestWithMaxDebtRefusesOutOfRange(t *testing.T) {
	p := mustParams(t, 10, "1/s")
	for _, d := range []int64{-1, MaxDebt + 1} {
		if _, err := p.WithMaxDebt(d); err == nil {
			t.Errorf("debt %d accepted", d)
		}
	}
	if q, err := p.WithMaxDebt(MaxDebt); err != nil || q.MaxDebt() != MaxDebt || q == p {
		t.Errorf("debt %d: %v %v", int64(MaxDebt), q, err)
	}
}

// TestTransitionCarriesDebt: a parameter change while in debt keeps the
// debt in tokens under both modes, clamped to the new bound.
func TestTransitionCarriesDebt(t *testing.T) {
	old, _ := mustParams(t, 100, "10/s").WithMaxDebt(1000)
	s, _ := old.Report(old.Full(0), 0, 600) // -500
	for _, c := range []struct {
		name string
		to   Params
		mode ResizeMode
		want int64
	}{
		{"clamp, same bound", must(mustParams(t, 50, "10/s").WithMaxDebt(1000)), Clamp, -490},
		{"scale keeps a debt as it is", must(mustParams(t, 200, "10/s").WithMaxDebt(1000)), Scale, -490},
		{"a smaller bound", must(mustParams(t, 100, "10/s").WithMaxDebt(300)), Clamp, -300},
		{"pre-paid again: at zero", mustParams(t, 100, "10/s"), Scale, 0},
	} {
		got := Transition(s, old, c.to, sec, c.mode) // +10 at the old rate
		if got.Tokens != c.want || got.Frac != 0 || got.At != sec {
			t.Errorf("%s: got %+v, want %d tokens at 1s", c.name, got, c.want)
		}
	}
}

func must(p Params, err error) Params {
	if err != nil {
		panic(err)
	}
	return p
}

// TestBudgetNeverRefills: a budget's bucket gains nothing with time, a
// wait for what it lacks is MaxDuration, and its conversions keep whole
// tokens.
func TestBudgetNeverRefills(t *testing.T) {
	p, err := NewBudget(100)
	if err != nil || p.Refills() {
		t.Fatal(err, p.Refills())
	}
	if _, err := NewBudget(0); err == nil {
		t.Error("a budget of 0 is accepted")
	}
	s, r := p.Decide(p.Full(0), 0, 60)
	if !r.Allowed || s.Tokens != 40 {
		t.Fatalf("charge 60: %+v %+v", s, r)
	}
	year := int64(400 * 24 * 3600 * 1e9)
	if s = p.Refill(s, year); s.Tokens != 40 || s.Frac != 0 || s.At != year {
		t.Fatalf("after a long wait: %+v", s)
	}
	if _, r = p.Decide(s, year, 41); r.Allowed || r.RetryAfter != MaxDuration || p.UntilFull(s, year) != MaxDuration {
		t.Errorf("a cost it lacks: %+v, until full %d", r, p.UntilFull(s, year))
	}
	d, _ := p.WithMaxDebt(100)
	s, r = d.Report(s, year, 90)
	if r.Allowed || s.Tokens != -50 || r.RetryAfter != MaxDuration {
		t.Errorf("a report into debt: %+v %+v", s, r)
	}
	q, _ := NewBudget(250)
	if got := Transition(State{Tokens: 40, At: 0}, p, q, 0, Scale); got.Tokens != 100 || got.Frac != 0 {
		t.Errorf("scaled 40/100 to a budget of 250: %+v, want 100", got)
	}
	rate, _ := NewRate(1, 3*time.Second)
	refilling, _ := NewParams(100, rate)
	if got := Transition(State{Tokens: 10, Frac: 2, At: 0}, refilling, q, 0, Clamp); got.Tokens != 10 || got.Frac != 0 {
		t.Errorf("a fraction into a budget: %+v, want it rounded down", got)
	}
	if got := Transition(State{Tokens: 10, Frac: 2, At: 0}, refilling, q, 0, Scale); got.Tokens != 25 || got.Frac != 0 {
		t.Errorf("scaled into a budget: %+v, want 25", got)
	}
}
