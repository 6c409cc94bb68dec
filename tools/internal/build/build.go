// Package build builds the tokengate binary from the main module for the
// tools' tests, the way a user would: `go build ./cmd/tokengate` in the
// repository's root, with the main module's own dependencies.
package build

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository's root (the main module), found from this file so
// that tests run from any directory.
func Root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Tokengate builds tokengate into the test's temporary directory and
// returns the binary's path.
func Tokengate(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tokengate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tokengate")
	cmd.Dir = Root(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tokengate: %v\n%s", err, out)
	}
	return bin
}
