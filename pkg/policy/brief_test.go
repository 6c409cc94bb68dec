package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestBrief: a policy with 20,000 errors is a few KB in a log line or a
// NACK, naming the first ones and counting the rest; its Error still
// names every one.
func TestBrief(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: many\ndescriptors:\n")
	for i := range 20_000 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", i)
	}
	_, err := Parse("r.yaml", []byte(b.String()))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 20_000 {
		t.Fatalf("want 20,000 errors, got %d: %.200v", len(errs), err)
	}
	brief := Brief(err)
	if len(brief) > MaxBriefIssues*(MaxBriefLine+1)+100 {
		t.Fatalf("Brief is %d bytes", len(brief))
	}
	lines := strings.Split(brief, "\n")
	if len(lines) != MaxBriefIssues+1 || lines[0] != errs[0].Error() || lines[MaxBriefIssues] != "... and 19980 more errors (tokengate validate lists them all)" {
		t.Fatalf("Brief: %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 20_000 {
		t.Fatalf("Error names %d issues, want all 20,000", n)
	}
	long := &Issue{File: "r.yaml", Line: 1, Err: errors.New(strings.Repeat("é", 1000))}
	if got := Brief(Errors{long}); len(got) > MaxBriefLine+32 || !strings.HasSuffix(got, "... (2010 bytes)") {
		t.Fatalf("one long issue: %d bytes, %q", len(got), got[len(got)-40:])
	}
}
