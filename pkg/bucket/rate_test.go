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
		"1/367d", "1/9000h", "1000000000001/s", "1.5/s", "99999999999999999999/s"} {
		if r, err := ParseRate(in); err == nil {
			t.Errorf("%q: accepted as %v", in, r)
		}
	}
}
