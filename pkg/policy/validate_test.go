package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
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

// TestSHA256OfContent: a file validated as itself and as the only file of
// a directory has one sha256, the file's own (what sha256sum prints); a
// set of files has another.
func TestSHA256OfContent(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/policy.yaml"
	if err := os.WriteFile(file, []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(example))
	want := hex.EncodeToString(sum[:])
	for _, path := range []string{file, dir} {
		files, err := ReadFiles(path)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := ValidateFiles(&out, path, files); err != nil || !strings.HasSuffix(out.String(), "sha256 "+want+"\n") {
			t.Errorf("%s: %v %q, want sha256 %s", path, err, out.String(), want)
		}
	}
	two := []File{{Name: "d/a.yaml", Data: []byte(example)}, {Name: "d/b.yaml", Data: []byte("domain: other\n")}}
	if got := FilesSHA256("d", two); hex.EncodeToString(got[:]) == want {
		t.Error("a set of two files has the sum of its first")
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
