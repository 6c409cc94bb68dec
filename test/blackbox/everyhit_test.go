package blackbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

// TestRatelimitUsageLimit is issue 22's table on the binary invoked as
// ratelimit, with the reference's files on Redis (its only store): every
// hit charged (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, the
// reference's default), the report of 5000 on 1000 is charged into the
// debt (1000, one window) and the check after it is OVER_LIMIT; with it
// true too, as the reference still counts the descriptor that goes over
// (charge: stop_when_over).
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
		{true, []call{{0, "OK", 1000}, {5000, "OVER_LIMIT", 0}, {0, "OVER_LIMIT", 0}}},
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

// TestRatelimitStopWhenOver is the reference's
// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig on the binary
// invoked as ratelimit with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true,
// on Redis: of two descriptors, only the one that goes over is counted;
// then a check of it (over) beside a hit that fits charges the hit nothing.
func TestRatelimitStopWhenOver(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tgproc.WritePolicy(t, filepath.Join(dir, "domain.yaml"), `domain: domain
descriptors:
  - key: key4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    rate_limit: {unit: hour, requests_per_unit: 14}
`)
	rd := redistest.Start(t)
	p := tgproc.StartAs(t, binary, "ratelimit", append(compatEnv(root, rd.Addr(), loopback("0")...), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")...)
	ask := func(h4, h5 int64) *rlsv3.RateLimitResponse {
		var ds []*ratelimitv3.RateLimitDescriptor
		for _, k := range []struct {
			key, value string
			hits       int64
		}{{"key4", "value4", h4}, {"key5", "value5", h5}} {
			if k.hits >= 0 {
				d := tgproc.Descriptor(k.key, k.value)
				d.HitsAddend = wrapperspb.UInt64(uint64(k.hits))
				ds = append(ds, d)
			}
		}
		return p.Ask(t, "domain", 0, ds...)
	}
	hour := "HOUR"
	expectCompat(t, "to 10", ask(10, 10), rlsv3.RateLimitResponse_OK, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 5}, compatWant{rlsv3.RateLimitResponse_OK, 14, hour, 4})
	expectCompat(t, "hits 1", ask(1, 1), rlsv3.RateLimitResponse_OK, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 4}, compatWant{rlsv3.RateLimitResponse_OK, 14, hour, 3})
	expectCompat(t, "hits 2", ask(2, 2), rlsv3.RateLimitResponse_OK, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 2}, compatWant{rlsv3.RateLimitResponse_OK, 14, hour, 1})
	expectCompat(t, "key5 over", ask(2, 2), rlsv3.RateLimitResponse_OVER_LIMIT, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 2}, compatWant{rlsv3.RateLimitResponse_OVER_LIMIT, 14, hour, 0})
	expectCompat(t, "key5 checked, key4 fits", ask(1, 0), rlsv3.RateLimitResponse_OVER_LIMIT, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 2}, compatWant{rlsv3.RateLimitResponse_OVER_LIMIT, 14, hour, 0})
	expectCompat(t, "key4 uncharged", ask(2, -1), rlsv3.RateLimitResponse_OK, compatWant{rlsv3.RateLimitResponse_OK, 15, hour, 0})
}
