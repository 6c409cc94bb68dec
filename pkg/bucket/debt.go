package bucket

// Post-paid buckets: usage reported after it was served (Report) may take
// the balance below zero, down to -MaxDebt() of the params, and the
// request-time question (Check) is whether at least one token is there.
//
// A balance below zero is kept as every balance is, floored (State): the
// whole tokens in Tokens, negative, and the fraction of the next token in
// Frac. Refill from a debt is the same exact integer refill, so a debt is
// repaid at the rule's rate to the nanosecond.

import "fmt"

// MaxDebt is the largest debt bound: like MaxCapacity, so capacity plus
// debt stays below 2^51 and every product with a period fits in 128 bits.
const MaxDebt = MaxCapacity

// WithMaxDebt returns p whose reports may take the balance down to -debt
// (0: never below zero). It fails for debt outside [0, MaxDebt].
func (p Params) WithMaxDebt(debt int64) (Params, error) {
	if debt < 0 || debt > MaxDebt {
		return Params{}, fmt.Errorf("max_debt %d out of range [0, %d]", debt, int64(MaxDebt))
	}
	p.maxDebt = debt
	return p, nil
}

// MaxDebt is how far below zero Report may take the balance: 0 unless
// WithMaxDebt said otherwise.
func (p Params) MaxDebt() int64 { return p.maxDebt }

// Check refills s up to now and says whether it holds at least one whole
// token: the request-time question of a post-paid rule. It charges
// nothing; when refused, RetryAfter is the time until the balance is back
// at one token (a debt repaid at the rule's rate).
func (p Params) Check(s State, now int64) (State, Result) {
	s = p.Refill(s, now)
	if s.Tokens >= 1 {
		return s, withBalance(s, Result{Allowed: true})
	}
	return s, withBalance(s, Result{RetryAfter: since(p.until(s, 1), s.At, now)})
}

// Report refills s up to now and charges cost, usage already served: never
// refused, never Never. The balance goes down at most to -MaxDebt(); the
// part of the cost beyond that is not charged and is returned as Forgiven.
// A cost < 0 refunds -cost tokens, capped at capacity, as Decide does.
// Allowed says whether the balance after it is still at least zero; when
// it is not, RetryAfter is the time until it is back at one token, when a
// Check passes again.
func (p Params) Report(s State, now, cost int64) (State, Result) {
	s = p.Refill(s, now)
	var r Result
	switch {
	case cost <= 0:
		s = p.refund(s, cost)
	default:
		// Tokens >= -maxDebt always (the floor of a balance that is), so
		// room is never negative; charging whole tokens keeps Frac.
		charged := min(cost, s.Tokens+p.maxDebt)
		s.Tokens -= charged
		r.Forgiven = cost - charged
	}
	r.Allowed = s.Tokens >= 0
	if !r.Allowed {
		r.RetryAfter = since(p.until(s, 1), s.At, now)
	}
	return s, withBalance(s, r)
}
