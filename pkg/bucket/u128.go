package bucket

import "math/bits"

// u128 is an unsigned 128-bit integer, enough for every intermediate product
// of the validated parameter range (see the package comment).
type u128 struct{ hi, lo uint64 }

func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add64(y uint64) u128 {
	lo, carry := bits.Add64(x.lo, y, 0)
	return u128{x.hi + carry, lo}
}

// sub returns x - y; the caller guarantees x >= y.
func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	return u128{x.hi - y.hi - borrow, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

// divmod returns x/d and x%d. The caller guarantees the quotient fits in 64
// bits (x.hi < d); bits.Div64 would panic otherwise.
func (x u128) divmod(d uint64) (q, r uint64) {
	return bits.Div64(x.hi, x.lo, d)
}

// ceilDiv returns ceil(x/d) as a duration in nanoseconds, saturated at
// MaxDuration when it does not fit in an int64.
func (x u128) ceilDiv(d uint64) int64 {
	if x.hi >= d {
		return MaxDuration
	}
	q, r := bits.Div64(x.hi, x.lo, d)
	if r != 0 {
		q++
	}
	if q > uint64(MaxDuration) || q == 0 && r != 0 {
		return MaxDuration
	}
	return int64(q)
}
