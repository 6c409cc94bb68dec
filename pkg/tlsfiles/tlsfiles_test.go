package tlsfiles

import (
	"bytes"
	"crypto/x509"
	"log/slog"
	"os"
	"testing"

	"github.com/tokengate/tokengate/internal/tlstest"
)

func serial(t *testing.T, f *Files) int64 {
	t.Helper()
	c, err := x509.ParseCertificate(f.Certificate().Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Int64()
}

func TestReloadsWhenFilesChange(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, dir, "srv")
	f, err := Load(first.CertFile, first.KeyFile, ca.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := serial(t, f); got != first.Serial.Int64() {
		t.Fatalf("serial %d, want %d", got, first.Serial)
	}
	second := ca.Server(t, dir, "srv") // rotated in place, same names
	if got := serial(t, f); got != second.Serial.Int64() {
		t.Fatalf("after rotation: serial %d, want %d", got, second.Serial)
	}

	// Half a rotation (a key that is not the certificate's) keeps the
	// last good pair serving, and the next good one is taken.
	other := ca.Server(t, t.TempDir(), "other")
	key, _ := os.ReadFile(other.KeyFile)
	if err := os.WriteFile(second.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, f); got != second.Serial.Int64() {
		t.Fatalf("with a mismatched key: serial %d, want the last good %d", got, second.Serial)
	}
	third := ca.Server(t, dir, "srv")
	if got := serial(t, f); got != third.Serial.Int64() {
		t.Fatalf("after the next rotation: serial %d, want %d", got, third.Serial)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	p := ca.Server(t, dir, "srv")
	for name, files := range map[string][3]string{
		"cert without key": {p.CertFile, "", ""},
		"missing key":      {p.CertFile, dir + "/none.pem", ""},
		"CA not PEM":       {"", "", p.KeyFile + ".nothing"},
		"key as CA":        {"", "", p.KeyFile},
	} {
		if _, err := Load(files[0], files[1], files[2], nil); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestFailureLoggedOnce: files that fail to load are read again on every
// handshake, but the failure is one line until it changes or the files
// load again.
func TestFailureLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	p := ca.Server(t, dir, "srv")
	var out bytes.Buffer
	f, err := Load(p.CertFile, p.KeyFile, "", slog.New(slog.NewTextHandler(&out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	lines := func() int { return bytes.Count(out.Bytes(), []byte("did not load")) }
	other := ca.Server(t, t.TempDir(), "other")
	key, _ := os.ReadFile(other.KeyFile)
	if err := os.WriteFile(p.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		f.Certificate()
	}
	if n := lines(); n != 1 {
		t.Fatalf("100 handshakes with a mismatched key: %d lines, want 1:\n%s", n, out.Bytes())
	}
	ca.Server(t, dir, "srv") // loads
	serial(t, f)
	if err := os.WriteFile(p.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	f.Certificate()
	if n := lines(); n != 2 {
		t.Fatalf("the same failure after a good load: %d lines, want 2:\n%s", n, out.Bytes())
	}
}
