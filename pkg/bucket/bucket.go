package bucket

import "fmt"

// Params are a bucket's capacity, refill rate and debt bound. The zero
// Params is a bucket of capacity 0 that never affords a positive cost;
// build real ones with NewParams (and WithMaxDebt, debt.go).
type Params struct {
	capacity int64
	rate     Rate
	maxDebt  int64 // how far below zero Report may take the balance
}

// NewParams validates capacity and rate against the exact range.
func NewParams(capacity int64, rate Rate) (Params, error) {
	if capacity <= 0 || capacity > MaxCapacity {
		return Params{}, fmt.Errorf("capacity %d out of range [1, %d]", capacity, int64(MaxCapacity))
	}
	if rate.IsZero() {
		return Params{}, fmt.Errorf("rate must be positive")
	}
	return Params{capacity: capacity, rate: rate}, nil
}

// NewBudget validates the capacity of a bucket that never refills: a
// calendar budget's for one period, whole again only as a new bucket (the
// next period's). Its Rate is the zero Rate; a balance has no fraction,
// and a wait for tokens it lacks is MaxDuration.
func NewBudget(capacity int64) (Params, error) {
	if capacity <= 0 || capacity > MaxCapacity {
		return Params{}, fmt.Errorf("budget %d out of range [1, %d]", capacity, int64(MaxCapacity))
	}
	return Params{capacity: capacity}, nil
}

// Refills reports whether the bucket refills: false for NewBudget's.
func (p Params) Refills() bool { return !p.rate.IsZero() }

// Capacity is the most tokens the bucket holds (its burst).
func (p Params) Capacity() int64 { return p.capacity }

// Rate is the refill rate.
func (p Params) Rate() Rate { return p.rate }

// State is one bucket's balance: Tokens whole tokens plus Frac/Per of the
// next token (Per is the params' reduced rate period), refilled up to the
// monotonic instant At. A balance below zero (a debt, debt.go) is floored:
// -0.5 is Tokens -1 and Frac Per/2, so Frac is never negative. The zero
// State is an empty bucket at instant 0; a new bucket normally starts from
// Params.Full.
type State struct {
	Tokens int64
	Frac   int64
	At     int64
}

// Result is the outcome of one decision.
type Result struct {
	// Allowed: the cost was covered (and, in Decide, consumed).
	Allowed bool
	// Never: the cost exceeds the capacity, so no amount of waiting makes it
	// affordable. Never implies !Allowed and RetryAfter == 0.
	Never bool
	// Remaining is the whole tokens left after the decision; 0 while the
	// balance is below zero.
	Remaining int64
	// RetryAfter is the nanoseconds from now until the cost becomes
	// affordable: 0 when allowed or never affordable; at least 1 when
	// rejected.
	RetryAfter int64
	// Debt is how far below zero the balance is after the decision, in
	// whole tokens rounded up: the tokens to repay before it is back at
	// zero; 0 when it is not below zero. Only Report takes it there.
	Debt int64
	// Forgiven is what of a report's cost was not charged because it went
	// beyond the debt bound (Report); 0 for every other decision.
	Forgiven int64
}

// Full is the state of a new bucket at now: full, with the cursor at now.
func (p Params) Full(now int64) State { return State{Tokens: p.capacity, At: now} }

// Refill returns s refilled up to now: min(capacity, s + (now-At)*rate).
// A now at or before s.At means no time passed; the cursor never moves back.
func (p Params) Refill(s State, now int64) State {
	if now <= s.At {
		return s
	}
	// now > s.At, so the unsigned difference is the exact elapsed time even
	// when the signed one would overflow. Tokens >= -MaxDebt, so
	// capacity-Tokens <= 2*10^15 and room fits in 128 bits.
	elapsed := uint64(now) - uint64(s.At)
	s.At = now
	if s.Tokens >= p.capacity {
		s.Tokens, s.Frac = p.capacity, 0
		return s
	}
	if p.rate.n == 0 {
		return s // a budget: nothing comes back
	}
	gain := mul64(elapsed, uint64(p.rate.n)).add64(uint64(s.Frac))
	room := mul64(uint64(p.capacity-s.Tokens), uint64(p.rate.per))
	if !gain.less(room) {
		s.Tokens, s.Frac = p.capacity, 0
		return s
	}
	per := uint64(p.rate.per)
	if gain.hi == 0 && gain.lo < per {
		// A hot bucket refilled moments ago gains less than a token: no
		// division on the hot path.
		s.Frac = int64(gain.lo)
		return s
	}
	// gain < room, so the quotient is below capacity-Tokens: it fits, and
	// so does Tokens plus it (below capacity).
	q, r := gain.divmod(per)
	s.Tokens += int64(q)
	s.Frac = int64(r)
	return s
}

// Decide refills s up to now and charges cost if the balance covers it.
//
// cost > 0 consumes; cost == 0 only checks; cost < 0 refunds -cost tokens,
// capped at capacity. A rejection consumes nothing but keeps the refilled
// balance. A cost above capacity is Never affordable and returns s unchanged.
// A balance below zero (a post-paid bucket's debt) affords no positive cost
// until it is repaid.
func (p Params) Decide(s State, now, cost int64) (State, Result) {
	if cost > p.capacity {
		return s, withBalance(p.Refill(s, now), Result{Never: true})
	}
	s = p.Refill(s, now)
	switch {
	case cost <= 0:
		s = p.refund(s, cost)
	case s.Tokens >= cost:
		s.Tokens -= cost
	default:
		return s, withBalance(s, Result{RetryAfter: since(p.until(s, cost), s.At, now)})
	}
	return s, withBalance(s, Result{Allowed: true})
}

// refund adds -cost (cost <= 0) to s, capped at capacity. It compares
// rather than negates: -cost overflows for the smallest int64.
func (p Params) refund(s State, cost int64) State {
	if cost <= s.Tokens-p.capacity {
		s.Tokens, s.Frac = p.capacity, 0
	} else {
		s.Tokens -= cost
	}
	return s
}

// Remaining is the whole tokens of s: Result.Remaining.
func (s State) Remaining() int64 { return max(s.Tokens, 0) }

// Debt is how far below zero s is, in whole tokens rounded up: Result.Debt.
func (s State) Debt() int64 { return max(-s.Tokens, 0) }

// withBalance is r with the balance of s: its whole tokens and its debt.
func withBalance(s State, r Result) Result {
	r.Remaining, r.Debt = s.Remaining(), s.Debt()
	return r
}

// UntilFull is the nanoseconds from now until s is full again (0 when it
// is full), saturated at MaxDuration. It is not part of Decide so that a
// store can work it out after releasing its lock.
func (p Params) UntilFull(s State, now int64) int64 {
	return since(p.until(s, p.capacity), s.At, now)
}

// since turns d, counted from the cursor at, into a duration counted from
// now: a reading behind the cursor (a request that waited for a lock while
// a later one went first) waits for the cursor too.
func since(d, at, now int64) int64 {
	if d == 0 || now >= at {
		return d
	}
	if lag := uint64(at) - uint64(now); lag < uint64(MaxDuration-d) {
		return d + int64(lag)
	}
	return MaxDuration
}

// until is the nanoseconds until s holds at least want tokens:
// ceil((want*per - (Tokens*per + Frac)) / n), 0 when it already does.
func (p Params) until(s State, want int64) int64 {
	if s.Tokens >= want {
		return 0
	}
	if p.rate.n == 0 {
		return MaxDuration // a budget: never
	}
	missing := mul64(uint64(want-s.Tokens), uint64(p.rate.per)).sub(u128{lo: uint64(s.Frac)})
	return missing.ceilDiv(uint64(p.rate.n))
}

// FullAt is the monotonic instant at which s becomes full, saturated at
// MaxDuration; a store may drop a bucket once it is full, because a full
// bucket carries no information.
func (p Params) FullAt(s State) int64 {
	d := p.until(s, p.capacity)
	if s.At > 0 && d > MaxDuration-s.At {
		return MaxDuration
	}
	return s.At + d
}
