package blackbox

import (
	"testing"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

// TestRatelimitRedisLost: run as ratelimit, as a new user migrating would,
// the reference's files (which name no on_store_error) are answered from
// each replica's local budget while Redis is lost: OK within the limit,
// marked degraded, OVER_LIMIT once the budget is spent; never every
// request refused.
func TestRatelimitRedisLost(t *testing.T) {
	rd := redistest.Start(t)
	p := tgproc.StartAs(t, binary, "ratelimit", compatEnv(runtimeDir(t, compatConfig+"integration"), rd.Addr(), loopback("0")...)...)
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return !tgproc.Degraded(p.Ask(t, "basic", 0, tgproc.Descriptor("key1", "warm")))
	}, "an answer from Redis")
	rd.Kill()
	// one_per_minute: a budget of 1 (the share is 1, the reference's single
	// replica), so the second request of the outage is over it.
	for i, want := range []string{"OK", "OVER_LIMIT"} {
		r := p.Ask(t, "basic", 1, tgproc.Descriptor("one_per_minute", "lost"))
		if r.OverallCode.String() != want || !tgproc.Degraded(r) {
			t.Fatalf("#%d with Redis lost: %v, want %s marked degraded (on_store_error local)", i, r, want)
		}
	}
	if r := p.Ask(t, "basic", 1, tgproc.Descriptor("key1", "lost")); r.OverallCode.String() != "OK" || !tgproc.Degraded(r) {
		t.Fatalf("key1 with Redis lost: %v, want OK marked degraded", r)
	}
}
