package bucket

import (
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is the specification of a bucket in exact rationals: the balance is
// a big.Rat in [-debt, capacity] and refill is min(capacity, balance +
// elapsed*rate).
type model struct {
	capacity *big.Rat
	debt     int64    // how far below zero a report may take the balance
	rate     *big.Rat // tokens per ns
	per      int64    // the fixed-point unit of the balance is 1/per token
	bal      *big.Rat
	at       int64
}

func newModel(p Params, now int64) *model {
	m := &model{at: now}
	m.set(p)
	m.bal = new(big.Rat).Set(m.capacity)
	return m
}

func (m *model) set(p Params) {
	m.capacity = new(big.Rat).SetInt64(p.capacity)
	m.debt = p.maxDebt
	m.rate = big.NewRat(p.rate.n, p.rate.per)
	m.per = p.rate.per
}

func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) < 0 {
		return a
	}
	return b
}

func (m *model) refill(now int64) {
	if now <= m.at {
		return
	}
	elapsed := new(big.Rat).SetInt(new(big.Int).Sub(big.NewInt(now), big.NewInt(m.at)))
	m.bal = minRat(new(big.Rat).Add(m.bal, elapsed.Mul(elapsed, m.rate)), m.capacity)
	m.at = now
}

// floorRat rounds r down, below zero too (Euclidean division by the
// positive denominator).
func floorRat(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) }

// floorTo rounds r down to a multiple of 1/unit.
func floorTo(r *big.Rat, unit int64) *big.Rat {
	n := floorRat(new(big.Rat).Mul(r, new(big.Rat).SetInt64(unit)))
	return new(big.Rat).SetFrac(n, big.NewInt(unit))
}

// saturate is the int64 of n, or MaxDuration when n does not fit.
func saturate(n *big.Int) int64 {
	if !n.IsInt64() {
		return MaxDuration
	}
	return n.Int64()
}

func ceilRat(r *big.Rat) *big.Int {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// stateRat is the exact balance a State stands for under p.
func stateRat(s State, p Params) *big.Rat {
	b := new(big.Rat).SetInt64(s.Tokens)
	return b.Add(b, big.NewRat(s.Frac, p.rate.per))
}

func drawParams(t *rapid.T, label string) Params {
	capacity := rapid.OneOf(rapid.Int64Range(1, 100), rapid.Int64Range(1, MaxCapacity)).Draw(t, label+"capacity")
	tokens := rapid.OneOf(rapid.Int64Range(1, 20), rapid.Int64Range(1, MaxRateTokens)).Draw(t, label+"tokens")
	per := rapid.OneOf(rapid.SampledFrom([]int64{int64(time.Second), int64(time.Minute), 3 * int64(time.Second), int64(time.Millisecond)}),
		rapid.Int64Range(1, MaxRatePer)).Draw(t, label+"per")
	r, err := NewRate(tokens, time.Duration(per))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewParams(capacity, r)
	if err == nil {
		p, err = p.WithMaxDebt(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 100), rapid.Int64Range(0, MaxDebt)).Draw(t, label+"debt"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkpoint anchors the no-oversell window check: at cursor `at` the
// balance was `bal` and `spent` had been charged so far.
type checkpoint struct {
	at    int64
	bal   *big.Rat
	spent *big.Int
}

// kind is which decision a step makes.
type kind int

const (
	kindDecide kind = iota // pre-paid
	kindCheck
	kindReport
)

// decide is the model's answer to a decision of kind k and cost at now,
// already refilled to now: the result and what it charged.
func (m *model) decide(k kind, cost, now int64) (Result, int64) {
	var r Result
	charged := int64(0)
	switch {
	case k == kindCheck:
		r.Allowed = floorRat(m.bal).Cmp(big.NewInt(1)) >= 0
	case k == kindReport && cost > 0:
		charged = min(cost, floorRat(m.bal).Int64()+m.debt)
		r.Forgiven = cost - charged
	case cost <= 0 || floorRat(m.bal).Cmp(big.NewInt(cost)) >= 0:
		r.Allowed, charged = true, cost
	}
	if charged != 0 {
		m.bal = minRat(new(big.Rat).Sub(m.bal, new(big.Rat).SetInt64(charged)), m.capacity)
	}
	want := cost
	if k == kindReport {
		r.Allowed, want = m.bal.Sign() >= 0, 1
	} else if k == kindCheck {
		want = 1
	}
	if !r.Allowed {
		missing := new(big.Rat).Sub(new(big.Rat).SetInt64(want), m.bal)
		wait := ceilRat(missing.Quo(missing, m.rate))
		r.RetryAfter = saturate(wait.Add(wait, big.NewInt(max(m.at-now, 0))))
	}
	whole := floorRat(m.bal).Int64()
	r.Remaining, r.Debt = max(whole, 0), max(-whole, 0)
	return r, charged
}

// transition is Transition in the model: the balance refilled to at, then
// clamped into the new bounds or, under Scale and not in debt, scaled; then
// rounded down to the new unit.
func (m *model) transition(from, to Params, at int64, mode ResizeMode) {
	m.refill(at)
	if mode == Scale && m.bal.Sign() >= 0 {
		m.bal = new(big.Rat).Mul(m.bal, big.NewRat(to.capacity, from.capacity))
	} else {
		m.bal = minRat(m.bal, new(big.Rat).SetInt64(to.capacity))
		if floor := new(big.Rat).SetInt64(-to.maxDebt); m.bal.Cmp(floor) < 0 {
			m.bal = floor
		}
	}
	m.set(to)
	m.bal = floorTo(m.bal, m.per)
}

// TestStateMachine runs random decisions (pre-paid, checks and reports) and
// transitions against the model: after every step the balance equals the
// model's exactly, -debt <= balance <= capacity, and over every window since
// the last transition the charged cost is at most the initial balance plus
// the theoretical refill plus the debt bound.
func TestStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawParams(t, "")
		now := rapid.Int64Range(-1<<40, 1<<40).Draw(t, "start")
		s := p.Full(now)
		m := newModel(p, now)
		spent := new(big.Int)
		marks := []checkpoint{{now, new(big.Rat).Set(m.bal), new(big.Int)}}

		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			step := rapid.OneOf(
				rapid.Int64Range(-int64(time.Second), int64(time.Second)),
				rapid.Int64Range(-1<<20, 1<<40),
				rapid.Int64Range(0, 1<<55),
			).Draw(t, "dt")
			if now+step < now == (step > 0) || now+step > 1<<61 {
				step = 0
			}
			now += step

			if rapid.IntRange(0, 9).Draw(t, "transition") == 0 {
				to := drawParams(t, "to ")
				mode := ResizeMode(rapid.IntRange(0, 1).Draw(t, "mode"))
				at := now - rapid.Int64Range(0, int64(time.Minute)).Draw(t, "at back")
				s = Transition(s, p, to, at, mode)
				m.transition(p, to, at, mode)
				p = to
				marks = []checkpoint{{m.at, new(big.Rat).Set(m.bal), new(big.Int).Set(spent)}}
				check(t, s, p, m)
				continue
			}

			k := kind(rapid.IntRange(0, 2).Draw(t, "kind"))
			cost := rapid.OneOf(rapid.Int64Range(0, 5), rapid.Int64Range(-p.capacity, p.capacity+1),
				rapid.Int64Range(-3*(p.capacity+p.maxDebt), 3*(p.capacity+p.maxDebt)), rapid.Int64Range(-1<<62, 1<<62)).Draw(t, "cost")
			before := s
			var r Result
			switch k {
			case kindCheck:
				s, r = p.Check(s, now)
			case kindReport:
				s, r = p.Report(s, now, cost)
			default:
				s, r = p.Decide(s, now, cost)
			}
			if k == kindDecide && cost > p.capacity {
				if !r.Never || r.Allowed || s != before {
					t.Fatalf("cost %d > capacity %d: got %+v, state %+v -> %+v", cost, p.capacity, r, before, s)
				}
				continue
			}
			m.refill(now)
			want, charged := m.decide(k, cost, now)
			spent.Add(spent, big.NewInt(charged))
			toFull := new(big.Rat).Sub(m.capacity, m.bal)
			reset := saturate(ceilRat(toFull.Quo(toFull, m.rate)))
			if reset != 0 {
				reset = saturate(new(big.Int).Add(big.NewInt(reset), big.NewInt(max(m.at-now, 0))))
			}
			if r != want || p.UntilFull(s, now) != reset {
				t.Fatalf("kind %d cost %d at %d: got %+v, model %+v reset=%d balance=%s", k, cost, now, r, want, reset, m.bal.FloatString(9))
			}
			check(t, s, p, m)
			debt := new(big.Rat).SetInt64(p.maxDebt)
			for _, c := range marks {
				refill := new(big.Rat).SetInt(new(big.Int).Sub(big.NewInt(m.at), big.NewInt(c.at)))
				limit := new(big.Rat).Add(c.bal, refill.Mul(refill, m.rate))
				used := new(big.Rat).SetInt(new(big.Int).Sub(spent, c.spent))
				if used.Cmp(limit.Add(limit, debt)) > 0 {
					t.Fatalf("oversold: %s charged since %d, at most %s affordable", used, c.at, limit.FloatString(3))
				}
			}
			marks = append(marks, checkpoint{m.at, new(big.Rat).Set(m.bal), new(big.Int).Set(spent)})
		}
	})
}

func check(t *rapid.T, s State, p Params, m *model) {
	if got := stateRat(s, p); got.Cmp(m.bal) != 0 {
		t.Fatalf("balance %s (state %+v), model %s", got.FloatString(12), s, m.bal.FloatString(12))
	}
	if s.At != m.at {
		t.Fatalf("cursor %d, model %d", s.At, m.at)
	}
	if s.Tokens < -p.maxDebt || s.Tokens > p.capacity || s.Frac < 0 || s.Frac >= p.rate.per || (s.Tokens == p.capacity && s.Frac != 0) {
		t.Fatalf("state %+v out of range for capacity %d debt %d per %d", s, p.capacity, p.maxDebt, p.rate.per)
	}
}

// TestRefillStepsEqualOneStep: refilling over many small steps gives exactly
// the balance of one large step.
func TestRefillStepsEqualOneStep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawParams(t, "")
		s := State{Tokens: rapid.Int64Range(0, p.capacity).Draw(t, "tokens")}
		if s.Tokens < p.capacity {
			s.Frac = rapid.Int64Range(0, p.rate.per-1).Draw(t, "frac")
		}
		stepped := s
		var end int64
		for _, d := range rapid.SliceOfN(rapid.Int64Range(0, 1<<45), 1, 50).Draw(t, "steps") {
			end += d
			stepped = p.Refill(stepped, end)
		}
		if once := p.Refill(s, end); once != stepped {
			t.Fatalf("one step %+v, many steps %+v", once, stepped)
		}
	})
}
