package logbudget

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClip: short values as they are, long ones their first ClipBytes
// bytes (never half a UTF-8 sequence) and their length.
func TestClip(t *testing.T) {
	a64 := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "edge", "edge"},
		{"exactly ClipBytes", a64, a64},
		{"one byte over", a64 + "b", a64 + "…(65 bytes)"},
		{"60 KB", strings.Repeat("a", 60000), a64 + "…(60000 bytes)"},
		{"a 2-byte rune across the cut", strings.Repeat("a", 63) + "é" + "zz", strings.Repeat("a", 63) + "…(67 bytes)"},
		{"a 4-byte rune across the cut", strings.Repeat("a", 62) + "😀" + "z", strings.Repeat("a", 62) + "…(67 bytes)"},
		{"a rune ending at the cut", strings.Repeat("a", 62) + "é" + "z", strings.Repeat("a", 62) + "é…(65 bytes)"},
		{"all multi-byte", strings.Repeat("日", 30), strings.Repeat("日", 21) + "…(90 bytes)"},
		{"not UTF-8: cut where it is", strings.Repeat("\x80", 70), strings.Repeat("\x80", 61) + "…(70 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Clip(tc.in)
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
				t.Fatalf("got %q: not UTF-8", got)
			}
		})
	}
}

func TestClipShortAllocatesNothing(t *testing.T) {
	s := strings.Repeat("a", ClipBytes)
	if n := testing.AllocsPerRun(100, func() { _ = Clip(s) }); n != 0 {
		t.Fatalf("%v allocations for a short value", n)
	}
}
