package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExplainRLQS: explain --rlqs takes the entries as a BucketId, in any
// order, and names the rule and the assignment.
func TestExplainRLQS(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"explain", "--rlqs", "--domain", "edge", "path=/api/search", "user_id=alice"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), `matches rule "search-per-user"`) || !strings.Contains(out.String(), "rlqs: token_bucket of rule search-per-user: 1 requests (of 5 tokens) per fill_interval 1s") {
		t.Fatalf("exit %d, %q, %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run([]string{"explain", "--rlqs", "--front-door", "ext_authz"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--rlqs explains a BucketId") {
		t.Fatalf("--rlqs with --front-door: exit %d, %q", code, errOut.String())
	}
}

func TestRLQSSettingsCheck(t *testing.T) {
	for _, tc := range []struct {
		r    rlqsSettings
		want string
	}{
		{rlqsSettings{ReportingInterval: time.Second, MaxStreams: 1, MaxBucketsPerStream: 1}, ""},
		{rlqsSettings{ReportingInterval: time.Millisecond, MaxStreams: 1, MaxBucketsPerStream: 1}, "--rlqs-reporting-interval 1ms"},
		{rlqsSettings{ReportingInterval: time.Second, MaxBucketsPerStream: 1}, "--rlqs-max-streams 0"},
	} {
		err := tc.r.check()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

// TestValidateRLQSReach: validate says which rule RLQS cannot reach as a
// descriptor does.
func TestValidateRLQSReach(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeErr := os.WriteFile(file, []byte("domains:\n  edge:\n    - {name: ab, match: [{key: a}, {key: b}], capacity: 1, refill: 1/s}\n    - {name: ba, match: [{key: b}, {key: a}], capacity: 1, refill: 1/s}\n"), 0o644)
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", file}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `rlqs: domain "edge" rule "ba"`) || !strings.Contains(out.String(), "no BucketId reaches it") {
		t.Fatalf("exit %d, %q, %q", code, out.String(), errOut.String())
	}
}
