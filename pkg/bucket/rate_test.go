package bucket

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	cases := []struct {
		in     string
		tokens int64
		per    time.Duration
		str    string
	}{
		{"10/s", 1, 100 * time.Millisecond, "10/s"},
		{"600/m", 1, 100 * time.Millisecond, "10/s"},
		{"5000/h", 1, 720 * time.Millisecond, "5000/h"},
		{"1/d", 1, 24 * time.Hour, "1/d"},
		{"1/1500ms", 1, 1500 * time.Millisecond, "40/m"},
		{"7/3s", 7, 3 * time.Second, "140/m"},
		{" 3 / 2d ", 1, 16 * time.Hour, "1/16h0m0s"},
		{"1000000000/s", 1, time.Nanosecond, "1000/us"},
		// the reference's words, any case, singular or plural, with a count
		{"10/second", 1, 100 * time.Millisecond, "10/s"},
		{"10/sec", 1, 100 * time.Millisecond, "10/s"},
		{"10/secs", 1, 100 * time.Millisecond, "10/s"},
		{"600/minute", 1, 100 * time.Millisecond, "10/s"},
		{"600/min", 1, 100 * time.Millisecond, "10/s"},
		{"60/MINUTES", 1, time.Second, "1/s"},
		{"5000/hour", 1, 720 * time.Millisecond, "5000/h"},
		{"1/day", 1, 24 * time.Hour, "1/d"},
		{"1/2days", 1, 48 * time.Hour, "1/48h0m0s"},
		{"7/3seconds", 7, 3 * time.Second, "140/m"},
	}
	for _, c := range cases {
		r, err := ParseRate(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if r.Tokens() != c.tokens || r.Per() != c.per || r.String() != c.str {
			t.Errorf("%q: got %d/%v %q, want %d/%v %q", c.in, r.Tokens(), r.Per(), r, c.tokens, c.per, c.str)
		}
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Errorf("%q: String %q does not read back: %v %v", c.in, r, back, err)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, in := range []string{"", "10", "x/s", "0/s", "-1/s", "10/", "10/q", "10/0s", "10/-1s",
		"1/367d", "1/9000h", "1000000000001/s", "1.5/s", "99999999999999999999/s",
		"10/mins2", "10/hr", "10/ds", "10/sex", "1/367days", "1/99999999999999999days", "10/0minutes"} {
		if r, err := ParseRate(in); err == nil {
			t.Errorf("%q: accepted as %v", in, r)
		}
	}
}

// TestParseRateMessages: a fractional count names the whole rate to write
// instead when there is one; a bad period lists the units.
func TestParseRateMessages(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0.5/s", `rate "0.5/s": tokens "0.5" is not a whole number; write 1/2s`},
		{"1.5/3m", `rate "1.5/3m": tokens "1.5" is not a whole number; write 3/6m`},
		{"0.25/minute", `rate "0.25/minute": tokens "0.25" is not a whole number; write 1/4minute`},
		{"1e-3/s", `rate "1e-3/s": tokens "1e-3" is not a whole number; write 1/1000s`},
		{"0.5/1h30m", `rate "0.5/1h30m": tokens "0.5" is not a whole number`},
		{"0.001/d", `rate "0.001/d": tokens "0.001" is not a whole number`}, // 1/1000d is too long a period
		{"-0.5/s", `rate "-0.5/s": tokens "-0.5" is not a whole number`},
		{"x/s", `rate "x/s": tokens "x" is not a whole number`},
		{"99999999999999999999/s", `rate "99999999999999999999/s": tokens "99999999999999999999" is not a whole number`},
		{"10/q", `rate "10/q": period must be a unit (ns, us, ms, s, m, h, d, second, minute, hour, day, sec, min) or a duration such as 1500ms`},
		{"1/367days", `rate "1/367days": rate period 8808h0m0s out of range [1ns, 8784h0m0s]`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if _, err := ParseRate(tc.in); err == nil || err.Error() != tc.want {
				t.Errorf("ParseRate(%q) = %v, want %s", tc.in, err, tc.want)
			}
		})
	}
}
