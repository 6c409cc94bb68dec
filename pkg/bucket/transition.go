package bucket

import (
	"fmt"
	"math/big"
)

// ResizeMode says what a parameter change does to a live balance.
type ResizeMode uint8

const (
	// Clamp keeps the balance, capped at the new capacity.
	Clamp ResizeMode = iota
	// Scale keeps the balance's share of capacity: tokens * new/old capacity,
	// rounded down to the new fixed-point unit.
	Scale
)

// ParseResizeMode reads "clamp" or "scale"; "" means Clamp.
func ParseResizeMode(s string) (ResizeMode, error) {
	switch s {
	case "", "clamp":
		return Clamp, nil
	case "scale":
		return Scale, nil
	}
	return Clamp, fmt.Errorf("on_resize %q: want clamp or scale", s)
}

func (m ResizeMode) String() string {
	if m == Scale {
		return "scale"
	}
	return "clamp"
}

// Transition moves s from parameters `from` to `to`, activated at the
// monotonic instant at: s refills with the OLD parameters up to at, then its
// balance converts under mode. The cursor stays at max(s.At, at); the caller
// refills with the new parameters up to now (Decide does). Conversion rounds
// down to the new fixed-point unit, so it can never mint a fraction of a
// token.
//
// A debt (a balance below zero) carries over as it is, in tokens, under
// either mode (Scale scales only a balance of at least zero), clamped to
// the new debt bound: a bucket owing more than to.MaxDebt() owes exactly
// that, and one of a rule that is no longer post-paid (bound 0) is at zero.
func Transition(s State, from, to Params, at int64, mode ResizeMode) State {
	s = from.Refill(s, at)
	if from == to {
		return s
	}
	if mode == Scale && from.capacity > 0 && s.Tokens >= 0 {
		return scaled(s, from, to)
	}
	switch {
	case s.Tokens >= to.capacity:
		s.Tokens, s.Frac = to.capacity, 0
	case s.Tokens < -to.maxDebt:
		s.Tokens, s.Frac = -to.maxDebt, 0
	case s.Frac != 0 && to.rate.n == 0:
		s.Frac = 0 // a budget has no fraction: rounded down
	case s.Frac != 0:
		// Frac/per_old in units of 1/per_new: frac*per_new/per_old < per_new.
		s.Frac = int64(convertFrac(uint64(s.Frac), uint64(from.rate.per), uint64(to.rate.per)))
	}
	return s
}

func convertFrac(frac, from, to uint64) uint64 {
	q, _ := mul64(frac, to).divmod(from)
	return q
}

// scaled converts the balance b = Tokens + Frac/per_old to b*cap_new/cap_old
// in units of 1/per_new. The product has up to four 50-bit factors, so it is
// done in math/big; transitions happen once per bucket per reload, not per
// request.
func scaled(s State, from, to Params) State {
	if from.rate.n == 0 || to.rate.n == 0 {
		// A budget has no fraction: whole tokens, rounded down.
		// 0 <= Tokens <= from.capacity, so the quotient is at most
		// to.capacity: it fits.
		q, _ := mul64(uint64(s.Tokens), uint64(to.capacity)).divmod(uint64(from.capacity))
		s.Tokens, s.Frac = int64(q), 0
		return s
	}
	units := new(big.Int).Mul(big.NewInt(s.Tokens), big.NewInt(from.rate.per))
	units.Add(units, big.NewInt(s.Frac))
	units.Mul(units, big.NewInt(to.capacity))
	units.Mul(units, big.NewInt(to.rate.per))
	den := new(big.Int).Mul(big.NewInt(from.capacity), big.NewInt(from.rate.per))
	units.Quo(units, den)
	tokens, frac := units.QuoRem(units, big.NewInt(to.rate.per), new(big.Int))
	s.Tokens, s.Frac = tokens.Int64(), frac.Int64()
	if s.Tokens >= to.capacity {
		s.Tokens, s.Frac = to.capacity, 0
	}
	return s
}
