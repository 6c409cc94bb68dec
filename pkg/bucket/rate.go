package bucket

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Validated parameter range; see the package comment for why it is exact.
const (
	MaxCapacity   = 1_000_000_000_000_000       // 10^15 tokens
	MaxRateTokens = 1_000_000_000_000           // 10^12 tokens per period
	MaxRatePer    = 366 * 24 * int64(time.Hour) // one leap year, in ns
	// MaxDuration is the saturation value of every duration this package
	// returns (about 292 years).
	MaxDuration = math.MaxInt64
)

// Rate is a refill rate of n tokens per `per` nanoseconds, kept as a reduced
// fraction. The zero Rate is invalid; build one with NewRate or ParseRate.
type Rate struct {
	n   int64 // tokens, reduced
	per int64 // nanoseconds, reduced
}

// NewRate returns the rate of tokens per period, reduced to lowest terms.
// It fails for tokens or per outside the exact range.
func NewRate(tokens int64, per time.Duration) (Rate, error) {
	if tokens <= 0 || tokens > MaxRateTokens {
		return Rate{}, fmt.Errorf("rate tokens %d out of range [1, %d]", tokens, int64(MaxRateTokens))
	}
	if per <= 0 || int64(per) > MaxRatePer {
		return Rate{}, fmt.Errorf("rate period %v out of range [1ns, %v]", per, time.Duration(MaxRatePer))
	}
	g := gcd(tokens, int64(per))
	return Rate{n: tokens / g, per: int64(per) / g}, nil
}

// ParseRate reads "N/unit" or "N/duration": "10/s", "600/m", "5000/h",
// "1/d", "1/1500ms", "7/3s", "10/minute", "1/2days". Units are those of
// time.ParseDuration plus "d" (24h) and the reference's words (second,
// sec, minute, min, hour, day, in any case, singular or plural); a bare
// unit means one of it. N is whole: a fractional one is refused with the
// same rate over a longer period ("0.5/s": write 1/2s).
func ParseRate(s string) (Rate, error) {
	num, den, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/unit or N/duration, e.g. 10/s or 1/1500ms", s)
	}
	num, den = strings.TrimSpace(num), strings.TrimSpace(den)
	tokens, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: tokens %q is not a whole number%s", s, num, wholeHint(num, den))
	}
	per, err := parsePeriod(den)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	r, err := NewRate(tokens, per)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

// wholeHint is "; write P/QUNIT" for a positive fractional num of tokens
// (0.5, 1e-3) per den, when den is a count and a unit ("s", "3m") and the
// rate with whole tokens over the longer period is valid; otherwise "".
func wholeHint(num, den string) string {
	f, ok := new(big.Rat).SetString(num)
	count, unit := splitCount(den)
	if !ok || f.Sign() <= 0 || f.IsInt() || unit == "" || strings.ContainsAny(unit, "0123456789") {
		return ""
	}
	k, ok := new(big.Int).SetString(cmp.Or(count, "1"), 10)
	if !ok {
		return ""
	}
	alt := f.Num().String() + "/" + k.Mul(k, f.Denom()).String() + unit
	if _, err := ParseRate(alt); err != nil {
		return ""
	}
	return "; write " + alt
}

var errPeriod = errors.New("period must be a unit (ns, us, ms, s, m, h, d, second, minute, hour, day, sec, min) or a duration such as 1500ms")

// periodWords are the reference's names of a period, and its short forms.
var periodWords = map[string]time.Duration{
	"second": time.Second, "sec": time.Second,
	"minute": time.Minute, "min": time.Minute,
	"hour": time.Hour, "day": 24 * time.Hour,
}

func parsePeriod(s string) (time.Duration, error) {
	if s == "" {
		return 0, errPeriod
	}
	count, unit := splitCount(s)
	word := strings.ToLower(unit)
	if len(word) > 3 {
		word = strings.TrimSuffix(word, "s") // plurals: seconds, mins
	}
	if d, ok := periodWords[word]; ok {
		n, err := strconv.ParseInt(cmp.Or(count, "1"), 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64/int64(d) {
			return 0, errPeriod // a longer one than MaxRatePer is NewRate's to refuse
		}
		return time.Duration(n) * d, nil
	}
	if count == "" {
		s = "1" + s
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n <= 0 || n > MaxRatePer/int64(24*time.Hour) {
			return 0, errPeriod
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errPeriod
	}
	return d, nil
}

// splitCount splits a period into its leading digits and the rest: "15m"
// is "15" and "m", "s" is "" and "s".
func splitCount(s string) (count, unit string) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// Tokens is the reduced numerator: tokens added every Per.
func (r Rate) Tokens() int64 { return r.n }

// Per is the reduced period in which Tokens are added.
func (r Rate) Per() time.Duration { return time.Duration(r.per) }

// IsZero reports whether r is the invalid zero Rate.
func (r Rate) IsZero() bool { return r.n == 0 }

// PerSecond returns the rate in tokens per second as a float, for display
// only; no decision ever uses it.
func (r Rate) PerSecond() float64 { return float64(r.n) * 1e9 / float64(r.per) }

// String formats the rate in the smallest unit that makes the count whole,
// in a form ParseRate reads back: "10/s", "40/m" for 1/1500ms, "1/d". The
// zero Rate (a budget's, NewBudget) is "0", which ParseRate refuses.
func (r Rate) String() string {
	if r.IsZero() {
		return "0"
	}
	for _, u := range [...]struct {
		d    int64
		name string
	}{{int64(time.Microsecond), "us"}, {int64(time.Millisecond), "ms"}, {int64(time.Second), "s"}, {int64(time.Minute), "m"}, {int64(time.Hour), "h"}, {int64(24 * time.Hour), "d"}} {
		// n/per == k/d exactly for a whole k when d*n is a multiple of per.
		if p := mul64(uint64(u.d), uint64(r.n)); p.hi == 0 && p.lo%uint64(r.per) == 0 {
			return strconv.FormatUint(p.lo/uint64(r.per), 10) + "/" + u.name
		}
	}
	return strconv.FormatInt(r.n, 10) + "/" + time.Duration(r.per).String()
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
