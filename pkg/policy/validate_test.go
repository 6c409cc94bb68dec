package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestSummaryAndValidate(t *testing.T) {
	sum := sha256.Sum256([]byte(example))
	want := "policy.yaml: OK: revision 3, 2 domains (edge: 4 rules, internal: 1 rule), sha256 " + hex.EncodeToString(sum[:]) + "\n"
	var out bytes.Buffer
	if err := Validate(&out, "policy.yaml", []byte(example)); err != nil || out.String() != want {
		t.Fatalf("Validate: %v\n%q\nwant\n%q", err, out.String(), want)
	}

	out.Reset()
	unreachable := example + "    - name: late\n      match: [{key: service, value: db}]\n      unlimited: true\n"
	if err := Validate(&out, "policy.yaml", []byte(unreachable)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `warning: policy.yaml:38: domain "internal" rule "late": never matches`) {
		t.Fatalf("warnings:\n%s", out.String())
	}

	out.Reset()
	err := Validate(&out, "policy.yaml", []byte("domains: {edge: [{name: x}]}\n"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 || out.Len() != 0 {
		t.Fatalf("bad file: %v, output %q", err, out.String())
	}
}

// TestValidateWarnsEmptyDomains: `tokengate validate` accepts a policy
// that limits nothing, and prints why after its summary.
func TestValidateWarnsEmptyDomains(t *testing.T) {
	var out bytes.Buffer
	if err := Validate(&out, "policy.yaml", []byte("domains: {}\n")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "policy.yaml: OK: revision 0, 0 domains") ||
		lines[1] != "warning: policy.yaml:1: domains: empty: the policy limits nothing (every request is answered OK)" {
		t.Fatalf("output:\n%s", out.String())
	}
}
