// Package suggest guesses what a misspelt name meant: the one "did you
// mean" of tokengate's commands, flags, settings, environment variables,
// policy fields, front-door actions and rate periods. Pure and safe for
// concurrent use.
package suggest

import (
	"fmt"
	"strings"
)

// MaxEdits is how far a guess may be from the name: a typo or two (a
// letter added, dropped, changed, or two neighbours swapped, each one edit).
const MaxEdits = 2

// Nearest is the candidate fewest edits from name (the first of equals),
// or "" and false when none is within MaxEdits or the edits are at least
// half the candidate (so that "ab" never suggests "cd"). A candidate equal
// to name is nearest at 0 edits.
func Nearest(name string, candidates []string) (string, bool) {
	best, bestD := "", MaxEdits+1
	for _, c := range candidates {
		if d := distance(name, c); d < bestD && 2*d < len(c) {
			best, bestD = c, d
		}
	}
	return best, bestD <= MaxEdits
}

// Hint is " (did you mean X?)" for the nearest candidate, or "" when
// none is near, to append to an error that names name.
func Hint(name string, candidates []string) string {
	if c, ok := Nearest(name, candidates); ok {
		return fmt.Sprintf(" (did you mean %s?)", c)
	}
	return ""
}

// OrKnown is Hint, or " (known: A, B, …)" listing every candidate when
// none is near: for a short, closed set of names (fields, actions) that
// the user may not know.
func OrKnown(name string, candidates []string) string {
	if h := Hint(name, candidates); h != "" {
		return h
	}
	return " (known: " + strings.Join(candidates, ", ") + ")"
}

// distance is the optimal string alignment distance of a and b, in bytes:
// Levenshtein's, with a swap of two neighbouring bytes one edit.
func distance(a, b string) int {
	// rows i-2, i-1 and i of the table, each len(b)+1 long
	pp, p, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range p {
		p[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(p[j]+1, cur[j-1]+1, p[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
		pp, p, cur = p, cur, pp
	}
	return p[len(b)]
}
