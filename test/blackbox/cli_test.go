package blackbox

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestCLIExitCodes (the built binary): help and version exit 0 with their
// text on stdout; a mistake exits 1 and says so on stderr.
func TestCLIExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a part of it
		stderr string
	}{
		{[]string{"--help"}, 0, "tokengate validate FILE", ""},
		{[]string{"-h"}, 0, "tokengate explain", ""},
		{[]string{"help"}, 0, "tokengate serve", ""},
		{[]string{"serve", "--help"}, 0, "--redis-addr", ""},
		{[]string{"validate", "--help"}, 0, "usage: tokengate validate FILE", ""},
		{[]string{"help", "explain"}, 0, "--front-door", ""},
		{[]string{"--version"}, 0, "tokengate ", ""},
		{[]string{"version"}, 0, "tokengate ", ""},
		{[]string{"frobnicate"}, 1, "", `unknown command "frobnicate"`},
		{[]string{"serve", "--no-such-flag"}, 1, "", "unknown flag: --no-such-flag"},
		{[]string{"--no-such-flag"}, 1, "", "unknown flag: --no-such-flag"},
		{[]string{"validate", "/nonexistent/policy.yaml"}, 1, "", "no such file"},
	} {
		cmd := exec.Command(binary, tc.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%v: exit %d (want %d)\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout.String(), stderr.String())
		}
	}
}
