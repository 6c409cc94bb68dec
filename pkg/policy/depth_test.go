package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// deepTree is a reference-format file whose descriptors nest levels deep,
// each with a limit, in flow style (a few bytes a level, as an attacker
// would write it).
func deepTree(levels int) []byte {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors: ")
	for i := range levels {
		fmt.Fprintf(&b, "[{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: ", i)
	}
	b.WriteString("[]")
	b.WriteString(strings.Repeat("}]", levels))
	b.WriteString("\n")
	return []byte(b.String())
}

// TestReferenceDepth: a tree as deep as a descriptor can be long compiles;
// one level more is refused, naming the depth; a tree of 4,900 levels (it
// took 74 s and 2.9 GB when flattening was cubic in the depth) is refused
// in well under 5 s (0.1 s on a quiet machine), and so is one of 5,000, past the YAML parser's own
// depth limit.
func TestReferenceDepth(t *testing.T) {
	p, err := Parse("r.yaml", deepTree(MaxMatchEntries))
	if err != nil {
		t.Fatalf("a tree %d levels deep: %v", MaxMatchEntries, err)
	}
	if n := len(p.Rules("deep")); n != MaxMatchEntries {
		t.Fatalf("a tree %d levels deep gave %d rules, want one a level", MaxMatchEntries, n)
	}
	for _, tc := range []struct {
		levels int
		says   string
	}{
		{MaxMatchEntries + 1, "k30.k31: nested deeper than 32 levels"},
		{4900, "nested deeper than 32 levels"},
		{5000, "yaml: exceeded max depth"},
	} {
		begin := time.Now()
		_, err := Parse("r.yaml", deepTree(tc.levels))
		took := time.Since(begin)
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(err.Error(), tc.says) {
			t.Fatalf("a tree %d levels deep: %v, want one error saying %q", tc.levels, err, tc.says)
		}
		if took > 5*time.Second {
			t.Fatalf("a tree %d levels deep took %v to refuse, want well under 5s (0.1s on a quiet machine)", tc.levels, took)
		}
	}
}

// TestMatchEntriesBound: a native rule matching more entries than a
// descriptor can have is refused.
func TestMatchEntriesBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("revision: 1\ndomains:\n  edge:\n    - name: long\n      capacity: 1\n      refill: 1/s\n      match:\n")
	for i := range MaxMatchEntries + 1 {
		fmt.Fprintf(&b, "        - {key: k%d}\n", i)
	}
	_, err := Parse("p.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "33 entries: a descriptor has at most 32") {
		t.Fatalf("a rule of %d match entries: %v", MaxMatchEntries+1, err)
	}
}
