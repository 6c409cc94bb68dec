package blackbox

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/tgproc"
)

// limitedKey is the bucket key of the metadata of alice's refusal: her
// bucket of capacity 1 asked twice.
func limitedKey(t *testing.T, p *tgproc.Proc) string {
	t.Helper()
	askAlice(t, p, 1)
	r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice"))
	key := r.GetDynamicMetadata().GetFields()["key"].GetStringValue()
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(key) {
		t.Fatalf("metadata key %q of %v: want 12 hex digits", key, r)
	}
	return key
}

// TestKeyHashSharedSecret: two replicas given one --key-hash-secret-file
// name alice's bucket alike in the metadata, and tokengate explain, given
// the file, prints that name; one without the secret names it otherwise,
// and explain without it says it needs it. A short secret stops the start.
func TestKeyHashSharedSecret(t *testing.T) {
	pol := tgproc.PolicyFile(t, perUser(1, 1))
	secret := filepath.Join(t.TempDir(), "key-hash-secret")
	writeFile(t, secret, "a secret of at least sixteen bytes\n")
	a := start(t, "--policy", pol, "--key-hash-secret-file", secret)
	b := start(t, "--policy", pol, "--key-hash-secret-file", secret)
	other := start(t, "--policy", pol)
	key := limitedKey(t, a)
	if k := limitedKey(t, b); k != key {
		t.Errorf("replicas with one secret: %q and %q", key, k)
	}
	if k := limitedKey(t, other); k == key {
		t.Errorf("a replica with a random secret names the bucket %q too", k)
	}

	explain := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append([]string{"explain", "--policy", pol, "--domain", "edge"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("explain %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := explain("--key-hash-secret-file", secret, "user_id=alice"); !strings.Contains(out, "\n  bucket key hash: "+key+" ") {
		t.Errorf("explain with the secret, where the metadata says %s:\n%s", key, out)
	}
	if out := explain("user_id=alice"); !strings.Contains(out, "bucket key hash: needs the deployment's secret (--key-hash-secret-file)") {
		t.Errorf("explain without the secret:\n%s", out)
	}

	short := filepath.Join(t.TempDir(), "short")
	writeFile(t, short, "too short\n")
	out, err := exec.Command(binary, "serve", "--policy", pol, "--key-hash-secret-file", short, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--key-hash-secret-file "+short+": the secret is 9 bytes: want at least 16") {
		t.Errorf("a 9-byte secret: %v\n%s", err, out)
	}
}
