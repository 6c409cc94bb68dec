package logbudget

import (
	"strconv"
	"unicode/utf8"
)

// ClipBytes is the most bytes of a client's value that Clip keeps.
const ClipBytes = 64

// Clip is s as a log line (or an error a client may read) should carry a
// value a client chose (a domain, a descriptor value, a header, a path):
// s itself when it has at most ClipBytes bytes, else its first ClipBytes
// bytes, cut back to the start of a UTF-8 sequence so that a valid s stays
// valid, then "…" and its length, as in `abc…(60000 bytes)`. A value short
// enough costs nothing; a clipped one one allocation.
func Clip(s string) string {
	if len(s) <= ClipBytes {
		return s
	}
	n := ClipBytes
	// A UTF-8 sequence is at most UTFMax bytes: back up over at most the
	// continuation bytes of one, so that bytes that are not UTF-8 are cut
	// where they are.
	for back := 0; back < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); back++ {
		n--
	}
	b := make([]byte, 0, n+len("…( bytes)")+20)
	b = append(b, s[:n]...)
	b = append(b, "…("...)
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, " bytes)"...)
	return string(b)
}
