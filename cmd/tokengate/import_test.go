package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const refExample = "../../pkg/policy/testdata/envoyproxy/examples/example.yaml"

func TestImport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "native.yaml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import", "-o", out, refExample}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Fatalf("import: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"token bucket, not a fixed window", "duration_until_reset", "charge: every_hit: as there, every hit is counted",
		"example.yaml:55: domain \"rl\" rule \"foo.bar_banned\": requests_per_unit 0", "example.yaml:94: domain \"rl\": metadata"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stderr.String())
		}
	}
	stdout.Reset()
	if code := run([]string{"validate", out}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "OK: revision 0, 1 domain (rl: 17 rules (14 every_hit))") {
		t.Fatalf("validate the import: exit %d, %q", code, stdout.String())
	}
	// Only the hits that go over, as STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true serves it.
	stderr.Reset()
	if code := run([]string{"import", "--reference-charge", "stop_when_over", "-o", out, refExample}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), "charge: stop_when_over: as there with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true") {
		t.Fatalf("import --reference-charge stop_when_over: exit %d, %q", code, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"validate", out}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "OK: revision 0, 1 domain (rl: 17 rules (14 stop_when_over))") {
		t.Fatalf("validate the stop_when_over import: exit %d, %q", code, stdout.String())
	}
	// Pre-paid.
	stderr.Reset()
	if code := run([]string{"import", "--reference-charge", "before_request", "-o", out, refExample}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), "when one is over the limit none is charged") {
		t.Fatalf("import --reference-charge before_request: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"validate", out}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "OK: revision 0, 1 domain (rl: 17 rules)") {
		t.Fatalf("validate the pre-paid import: exit %d, %q", code, stdout.String())
	}
	stderr.Reset()
	if code := run([]string{"import", "--reference-charge", "later", refExample}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `--reference-charge "later": want every_hit, stop_when_over or before_request`) {
		t.Fatalf("import --reference-charge later: exit %d, %q", code, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"explain", "--policy", out, "--domain", "rl", "foo=a", "bar=banned"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "capacity 0: always OVER_LIMIT") {
		t.Fatalf("explain the import: exit %d, %q", code, stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"import", out}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "is not in envoyproxy/ratelimit's format") {
		t.Fatalf("import of a native file: exit %d, %q", code, stderr.String())
	}
}

func TestValidateAndExplainReferenceDirectory(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(refExample)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "example.yaml"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o644)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", dir}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "2 domains (other: 1 rule (1 every_hit), rl: 17 rules (14 every_hit))") || !strings.Contains(stdout.String(), "warning: "+filepath.Join(dir, "example.yaml")+":94") {
		t.Fatalf("validate: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"explain", "--policy", dir, "--domain", "other", "k=v"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), `matches rule "k" (`+filepath.Join(dir, "other.yaml")+":3)") {
		t.Fatalf("explain: exit %d, %q", code, stdout.String())
	}
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"), 0o644)
	stderr.Reset()
	if code := run([]string{"validate", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), filepath.Join(dir, "bad.yaml")+`:4: domain "bad": rate_limit: k: invalid rate limit unit`) {
		t.Fatalf("validate a bad directory: exit %d, %q", code, stderr.String())
	}
}

// simulate reads a reference directory too: replayed side by side with
// its import, every request gets the same answer.
func TestSimulateReferenceAgainstImport(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "config")
	os.Mkdir(ref, 0o755)
	data, err := os.ReadFile(refExample)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ref, "example.yaml"), data, 0o644)
	native, trace := filepath.Join(dir, "native.yaml"), filepath.Join(dir, "trace.csv")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import", "-o", native, ref}, &stdout, &stderr); code != 0 {
		t.Fatalf("import: exit %d, %s", code, stderr.String())
	}
	lines := "t,domain,entries,hits\n"
	for i := range 4 {
		lines += fmt.Sprintf("%d,rl,foo=a;bar=bkthomps|source_cluster=proxy;destination_cluster=bkthomps,\n%d.25,rl,foo=a;bar=banned,\n%d.5,rl,service=service_1|service=service_2,\n%d.75,rl,foo=a;baz=shady,\n", i, i, i, i)
	}
	os.WriteFile(trace, []byte(lines), 0o644)
	stdout.Reset()
	if code := run([]string{"simulate", "--policy", ref, "--compare", native, "--trace", trace, "--format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("simulate: exit %d, %s", code, stderr.String())
	}
	var got struct {
		Requests int `json:"requests"`
		Over     int `json:"over_limit"`
		Compare  struct {
			Requests int `json:"requests"`
			Over     int `json:"over_limit"`
		} `json:"compare"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if got.Requests != 16 || got.Over == 0 || got.Over != got.Compare.Over || got.Compare.Requests != 16 {
		t.Fatalf("reference %d requests, %d over; import %d, %d\n%s", got.Requests, got.Over, got.Compare.Requests, got.Compare.Over, stdout.String())
	}
}
