package bucket

import "fmt"

// Params are a bucket's capacity and refill rate. The zero Params is a bucket
// of capacity 0 that never affords a positive cost; build real ones with
// NewParams.
type Params struct {
	capacity int64
	rate     Rate
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

// Capacity is the most tokens the bucket holds (its burst).
func (p Params) Capacity() int64 { return p.capacity }

// Rate is the refill rate.
func (p Params) Rate() Rate { return p.rate }

// State is one bucket's balance: Tokens whole tokens plus Frac/Per of the
// next token (Per is the params' reduced rate period), refilled up to the
// monotonic instant At. The zero State is an empty bucket at instant 0; a
// new bucket normally starts from Params.Full.
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
	// Remaining is the whole tokens left after the decision.
	Remaining int64
	// RetryAfter is the nanoseconds from now until the cost becomes
	// affordable: 0 when allowed or never affordable; at least 1 when
	// rejected.
	RetryAfter int64
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
	// when the signed one would overflow.
	elapsed := uint64(now) - uint64(s.At)
	s.At = now
	if s.Tokens >= p.capacity {
		s.Tokens, s.Frac = p.capacity, 0
		return s
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
	// gain < room <= capacity*per, so the quotient is below capacity.
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
func (p Params) Decide(s State, now, cost int64) (State, Result) {
	if cost > p.capacity {
		return s, Result{Never: true, Remaining: p.Refill(s, now).Tokens}
	}
	s = p.Refill(s, now)
	switch {
	case cost <= 0:
		// -cost cannot overflow: a refund beyond capacity is capped anyway.
		if cost < -p.capacity || s.Tokens-cost >= p.capacity {
			s.Tokens, s.Frac = p.capacity, 0
		} else {
			s.Tokens -= cost
		}
	case s.Tokens >= cost:
		s.Tokens -= cost
	default:
		return s, Result{Remaining: s.Tokens, RetryAfter: since(p.until(s, cost), s.At, now)}
	}
	return s, Result{Allowed: true, Remaining: s.Tokens}
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
