package blackbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

// TestRatelimitUsageLimit is issue 22's table on the binary invoked as
// ratelimit, with the reference's files on Redis (its only store): every
// hit charged (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, the
// reference's default), which the Redis store does not decide yet, stops
// the start saying so and naming the way out; with it true, the report of
// 5000 on 1000 is refused and charges nothing, and the check after it
// passes (the reference would still count the report: docs/reference-format.md).
func TestRatelimitUsageLimit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tgproc.WritePolicy(t, filepath.Join(dir, "llm.yaml"), "domain: llm\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	rd := redistest.Start(t)

	cmd := tgproc.CommandAs(t, binary, "ratelimit", compatEnv(root, rd.Addr(), loopback("0")...)...)
	cmd.Env = append(cmd.Env, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false")
	out, err := cmd.CombinedOutput()
	if err == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "charge: every_hit: rules charged below zero need --store memory for now") ||
		!strings.Contains(string(out), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true") {
		t.Fatalf("every hit on Redis: %v\n%s", err, out)
	}

	p := tgproc.StartAs(t, binary, "ratelimit", compatEnv(root, rd.Addr(), loopback("0")...)...)
	for i, c := range []struct {
		hits      uint64
		code      string
		remaining uint32
	}{{0, "OK", 1000}, {5000, "OVER_LIMIT", 1000}, {0, "OK", 1000}} {
		r := p.Ask(t, "llm", 0, llmCall("u", c.hits))
		if got := fmt.Sprint(r.OverallCode); got != c.code || r.Statuses[0].LimitRemaining != c.remaining {
			t.Fatalf("call %d (hits_addend %d): %v, want %s remaining %d", i, c.hits, r, c.code, c.remaining)
		}
	}
}
