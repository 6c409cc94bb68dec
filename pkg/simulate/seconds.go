package simulate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxSeconds is the largest whole number of seconds whose nanoseconds fit
// in an int64.
const maxSeconds = math.MaxInt64 / 1_000_000_000

// ParseSeconds reads a trace's t: seconds from the trace's start as a
// plain decimal ("0", "1.5", "0.999999999"), exactly, into nanoseconds; no
// float is involved, so 0.999999999 is one nanosecond before 1. A sign, an
// exponent, or a digit below the nanosecond other than 0 is an error.
func ParseSeconds(s string) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("t %q: want seconds from the start, a decimal such as 1.25", s)
	}
	if len(frac) > 9 {
		if strings.Trim(frac[9:], "0") != "" {
			return 0, fmt.Errorf("t %q: finer than a nanosecond", s)
		}
		frac = frac[:9]
	}
	var sec int64
	if whole != "" {
		var err error
		if sec, err = strconv.ParseInt(whole, 10, 64); err != nil || sec > maxSeconds {
			return 0, fmt.Errorf("t %q: more than %d seconds", s, int64(maxSeconds))
		}
	}
	var ns int64
	for i := range 9 {
		ns *= 10
		if i < len(frac) {
			ns += int64(frac[i] - '0')
		}
	}
	if sec == maxSeconds && ns > math.MaxInt64%1_000_000_000 {
		return 0, fmt.Errorf("t %q: more than %d seconds", s, int64(maxSeconds))
	}
	return sec*1_000_000_000 + ns, nil
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatSeconds writes nanoseconds as ParseSeconds reads them, with no
// trailing zeros: 1500000000 is "1.5", 1 is "0.000000001". ns must not
// be negative.
func FormatSeconds(ns int64) string {
	s := strconv.FormatInt(ns/1e9, 10)
	if f := ns % 1e9; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", f), "0")
	}
	return s
}
