package blackbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

// TestRatelimitUsageLimit is issue 22's table on the binary invoked as
// ratelimit, with the reference's files on Redis (its only store): every
// hit charged (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, the
// reference's default), the report of 5000 on 1000 is charged into the
// debt (1000, one window) and the check after it is OVER_LIMIT; with it
// true, the report is refused and charges nothing, and the check after it
// passes (the reference would still count the report: docs/reference-format.md).
func TestRatelimitUsageLimit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tgproc.WritePolicy(t, filepath.Join(dir, "llm.yaml"), "domain: llm\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	type call struct {
		hits      uint64
		code      string
		remaining uint32
	}
	for _, tc := range []struct {
		stop  bool
		calls []call
	}{
		{false, []call{{0, "OK", 1000}, {5000, "OVER_LIMIT", 0}, {0, "OVER_LIMIT", 0}}},
		{true, []call{{0, "OK", 1000}, {5000, "OVER_LIMIT", 1000}, {0, "OK", 1000}}},
	} {
		t.Run(fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", tc.stop), func(t *testing.T) {
			rd := redistest.Start(t)
			env := append(compatEnv(root, rd.Addr(), loopback("0")...), fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", tc.stop))
			p := tgproc.StartAs(t, binary, "ratelimit", env...)
			for i, c := range tc.calls {
				r := p.Ask(t, "llm", 0, llmCall("u", c.hits))
				if got := fmt.Sprint(r.OverallCode); got != c.code || r.Statuses[0].LimitRemaining != c.remaining {
					t.Fatalf("call %d (hits_addend %d): %v, want %s remaining %d", i, c.hits, r, c.code, c.remaining)
				}
			}
		})
	}
}
