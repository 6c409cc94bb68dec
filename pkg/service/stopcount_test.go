package service

// charge: stop_when_over, the reference's counting with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, against the reference:
// the issue's three calls, its own test's sequence, a mixed request and a
// replay (the rapid model: everyhit_test.go).

import (
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/policy"
)

// stopHourly is a reference file of domain with a limit an hour on each of
// two keys, its rules charge: stop_when_over.
func stopHourly(t *testing.T, domain, k1 string, n1 int, k2 string, n2 int) *policy.Policy {
	return compileReference(t, fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d}\n  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d}\n",
		domain, k1, n1, k2, n2), new(policy.StopWhenOver))
}

// TestStopWhenOverIssueTable: with the variable true the reference still
// counts the descriptor that goes over, so the issue's three calls end as
// with it false: the report of 5000 on 1000 is counted (to one window of
// debt) and the next check is OVER_LIMIT.
func TestStopWhenOverIssueTable(t *testing.T) {
	f := newCompatFixture(t, compileReference(t, usageReference, new(policy.StopWhenOver)))
	user := func(n uint64) *ratelimitv3.RateLimitDescriptor { return hits(descr("user_id", "u"), n) }
	f.expect("check", f.call("llm", user(0)), ok, want{ok, 1000, hour, 1000, ""})
	r := f.call("llm", user(5000))
	f.expect("report", r, over, want{over, 1000, hour, 0, ""})
	if r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 1000 {
		t.Fatalf("report: %v, want a debt of 1000", r)
	}
	f.expect("check in debt", f.call("llm", user(0)), over, want{over, 1000, hour, 0, ""})
	f.clk.Add(time.Hour)
	f.expect("repaid", f.call("llm", user(0)), ok, want{ok, 1000, hour, 0, ""})
}

// TestStopWhenOverReferenceSequence is the reference's
// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig: key4 (15 an
// hour) and key5 (14 an hour), both at 10 to start; hits of 1 and 2 fit;
// then 2 more fit key4 (13+2 = 15) but not key5: only key5 is counted (to
// 15, over), key4 answers OK with its 2 left, uncharged.
func TestStopWhenOverReferenceSequence(t *testing.T) {
	f := newCompatFixture(t, stopHourly(t, "domain", "key4", 15, "key5", 14))
	k4, k5 := descr("key4", "value4"), descr("key5", "value5")
	f.expect("to 10", f.call("domain", hits(k4, 10), hits(k5, 10)), ok, want{ok, 15, hour, 5, ""}, want{ok, 14, hour, 4, ""})
	f.expect("hits 1", f.call("domain", hits(k4, 1), hits(k5, 1)), ok, want{ok, 15, hour, 4, ""}, want{ok, 14, hour, 3, ""})
	f.expect("hits 2", f.call("domain", hits(k4, 2), hits(k5, 2)), ok, want{ok, 15, hour, 2, ""}, want{ok, 14, hour, 1, ""})
	f.expect("key5 over", f.call("domain", hits(k4, 2), hits(k5, 2)), over, want{ok, 15, hour, 2, ""}, want{over, 14, hour, 0, ""})
	// key4 was not charged, key5 was: 15 of 14, a check of it is over.
	f.expect("key4 alone", f.call("domain", hits(k4, 2)), ok, want{ok, 15, hour, 0, ""})
	f.expect("key5 check", f.call("domain", hits(k5, 0)), over, want{over, 14, hour, 0, ""})
}

// TestStopWhenOverMixed: a check (hits_addend 0) over its limit beside a
// hit that fits refuses the request and charges the hit nothing, as the
// reference's check is over and stops the other key's increment; a hit
// that does not fit beside it is counted.
func TestStopWhenOverMixed(t *testing.T) {
	f := newCompatFixture(t, stopHourly(t, "llm", "user_id", 1000, "model", 10))
	u, m := descr("user_id", "u"), descr("model", "m")
	f.expect("user over", f.call("llm", hits(u, 1500)), over, want{over, 1000, hour, 0, ""})
	f.expect("check and hit", f.call("llm", hits(u, 0), hits(m, 4)), over, want{over, 1000, hour, 0, ""}, want{ok, 10, hour, 10, ""})
	f.expect("check and hit over", f.call("llm", hits(u, 0), hits(m, 11)), over, want{over, 1000, hour, 0, ""}, want{over, 10, hour, 0, ""})
	f.expect("model counted", f.call("llm", hits(m, 0)), over, want{over, 10, hour, 0, ""})
	f.clk.Add(time.Hour / 2) // user_id: 500 back (of a debt of 500); model: 5 back (of a debt of 1)
	f.expect("both fit again", f.call("llm", hits(u, 0), hits(m, 1)), ok, want{ok, 1000, hour, 0, ""}, want{ok, 10, hour, 3, ""})
}

// TestStopWhenOverReplay: a repeat of a request id replays both decisions
// of a refused request: the descriptor that went over is counted once.
func TestStopWhenOverReplay(t *testing.T) {
	p, err := policy.Parse("policy.yaml", []byte(`request_id_key: request_id
domains:
  llm:
    - name: user
      match: [{key: user_id}]
      capacity: 10
      refill: 10/h
      charge: stop_when_over
    - name: model
      match: [{key: model}]
      capacity: 100
      refill: 100/h
      charge: stop_when_over
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newCompatFixture(t, p)
	id := descr("request_id", "r1")
	u, m := descr("user_id", "u"), descr("model", "m")
	for range 3 {
		f.expect("a request and its repeats", f.call("llm", id, hits(u, 12), hits(m, 5)), over,
			want{ok, -1, 0, 0, ""}, want{over, 10, hour, 0, "user"}, want{ok, 100, hour, 100, "model"})
	}
	// Counted once: 12 of 10, a debt of 2 (3 replays would make it 10).
	r := f.call("llm", hits(u, 0))
	if r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 2 {
		t.Fatalf("after the repeats: %v, want a debt of 2", r)
	}
	f.expect("model uncharged", f.call("llm", hits(m, 0)), ok, want{ok, 100, hour, 100, "model"})
}
