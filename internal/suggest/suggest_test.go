package suggest

import "testing"

func TestNearest(t *testing.T) {
	commands := []string{"serve", "validate", "explain", "simulate", "import", "version"}
	fields := []string{"name", "match", "capacity", "refill", "cost", "max_cost"}
	for _, tc := range []struct {
		name, in   string
		candidates []string
		want       string // "" for no guess
	}{
		{"one dropped", "valdate", commands, "validate"},
		{"one added", "capacityy", fields, "capacity"},
		{"swapped neighbours are one edit", "polciy", []string{"policy", "config"}, "policy"},
		{"two edits", "explian", commands, "explain"},
		{"three edits is too far", "vldt", commands, ""},
		{"exact", "serve", commands, "serve"},
		{"first of equals", "cost", []string{"most", "host"}, "most"},
		{"fewest wins over first", "refil", []string{"refine", "refill"}, "refill"},
		{"half the candidate is too much", "ab", []string{"cd"}, ""},
		{"short candidate, one edit", "mn", []string{"min", "m"}, "min"},
		{"nothing near", "frobnicate", fields, ""},
		{"no candidates", "x", nil, ""},
		{"empty name", "", []string{"s"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Nearest(tc.in, tc.candidates)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("Nearest(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

func TestHint(t *testing.T) {
	if got := Hint("valdate", []string{"validate"}); got != " (did you mean validate?)" {
		t.Errorf("Hint = %q", got)
	}
	if got := Hint("zzz", []string{"validate"}); got != "" {
		t.Errorf("Hint of nothing near = %q, want empty", got)
	}
}

func TestOrKnown(t *testing.T) {
	known := []string{"capacity", "refill"}
	if got := OrKnown("capacityy", known); got != " (did you mean capacity?)" {
		t.Errorf("OrKnown near = %q", got)
	}
	if got := OrKnown("burst", known); got != " (known: capacity, refill)" {
		t.Errorf("OrKnown of nothing near = %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3},
		{"kitten", "sitting", 3},
		{"ab", "ba", 1}, {"polciy", "policy", 1},
		{"ca", "abc", 3}, // optimal string alignment: no edit of a swapped pair
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
