package service

// charge: every_hit, the reference's counting, against the reference:
// the issue's three calls, several descriptors, and a plain model of its
// fixed-window counter.

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/policy"
)

// The issue's limit in the reference's format: 1000 an hour on user_id.
const usageReference = `domain: llm
descriptors:
  - key: user_id
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// compileReference compiles src, a reference file, its rules charged as
// charge says (nil: every hit).
func compileReference(t testing.TB, src string, charge *policy.Charge) *policy.Policy {
	t.Helper()
	p, err := (&policy.Compiler{ReferenceCharge: charge}).CompileFiles("llm.yaml", []policy.File{{Name: "llm.yaml", Data: []byte(src)}}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// prepaidCharge is before_request when prepaid, else nil (every hit).
func prepaidCharge(prepaid bool) *policy.Charge {
	if prepaid {
		return new(policy.BeforeRequest)
	}
	return nil
}

// TestEveryHitIssueTable is the issue's table on the reference's format:
// Envoy Gateway's check (hits_addend 0) and report (hits_addend = the
// tokens used) of a usage-based limit. Every hit charged (the reference's
// default), the report of 5000 on 1000 is counted, to one window of debt,
// and the next check is OVER_LIMIT until 1001 tokens are repaid at 1000/h
// (a hit of 1 fits again in 1h0m3.6s: retry-after 3604); the reference
// says OVER_LIMIT until its window turns. Pre-paid (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true)
// the report is refused and charges nothing: the check stays OK.
func TestEveryHitIssueTable(t *testing.T) {
	user := func(n uint64) *ratelimitv3.RateLimitDescriptor { return hits(descr("user_id", "u"), n) }
	for _, prepaid := range []bool{false, true} {
		t.Run(fmt.Sprintf("prepaid %v", prepaid), func(t *testing.T) {
			f := newCompatFixture(t, compileReference(t, usageReference, prepaidCharge(prepaid)))
			f.expect("check", f.call("llm", user(0)), ok, want{ok, 1000, hour, 1000, ""})
			remaining := uint32(0)
			if prepaid {
				remaining = 1000 // refused before the store, its bucket checked
			}
			f.expect("report", f.call("llm", user(5000)), over, want{over, 1000, hour, remaining, ""})
			r := f.call("llm", user(0))
			if prepaid {
				f.expect("check after a refused report", r, ok, want{ok, 1000, hour, 1000, ""})
				return
			}
			f.expect("check in debt", r, over, want{over, 1000, hour, 0, ""})
			if header(r, HeaderRetryAfter) != "3604" || r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 1000 {
				t.Fatalf("check in debt: %v", r)
			}
			// A check passes once the debt is repaid (the reference: the
			// count is no longer above the limit); a hit of 1 once a token
			// is back, which retry-after tells.
			f.clk.Add(time.Hour - time.Millisecond)
			f.expect("a moment before", f.call("llm", user(0)), over, want{over, 1000, hour, 0, ""})
			f.clk.Add(time.Millisecond)
			f.expect("repaid", f.call("llm", user(0)), ok, want{ok, 1000, hour, 0, ""})
			f.expect("a hit at zero", f.call("llm", user(1)), over, want{over, 1000, hour, 0, ""})
			f.clk.Add(3600*time.Millisecond + 3600*time.Millisecond) // the hit at zero's token too
			f.expect("a hit", f.call("llm", user(1)), ok, want{ok, 1000, hour, 0, ""})
		})
	}
}

// TestEveryHitDescriptors: every descriptor of a request is charged
// whatever the others say, as the reference counts with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false; a refused request's
// other descriptors are still charged.
func TestEveryHitDescriptors(t *testing.T) {
	f := newCompatFixture(t, compileReference(t, `domain: llm
descriptors:
  - key: user_id
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 100}
`, nil))
	u, m := descr("user_id", "u"), descr("model", "m")
	f.expect("both within", f.call("llm", hits(u, 50), hits(m, 60)), ok, want{ok, 1000, hour, 950, ""}, want{ok, 100, minute, 40, ""})
	f.expect("model over", f.call("llm", hits(u, 50), hits(m, 60)), over, want{ok, 1000, hour, 900, ""}, want{over, 100, minute, 0, ""})
	f.expect("checks", f.call("llm", hits(u, 0), hits(m, 0)), over, want{ok, 1000, hour, 900, ""}, want{over, 100, minute, 0, ""})
	f.expect("user alone", f.call("llm", hits(u, 0)), ok, want{ok, 1000, hour, 900, ""})
}

// refCounter is the reference's fixed-window counter within one window
// (redis/fixed_cache_impl.go DoLimit, no local cache): with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false every descriptor's key is
// incremented by its hits, whatever the others say; with it true (stop)
// the counts are read first, and when a key would go over (count + hits
// above the limit) only the keys that would are incremented, by their
// hits, the others by 0. A descriptor is OVER_LIMIT when the count after
// is above the limit, its limit_remaining the limit less the count when
// not (base_limiter.go GetResponseDescriptorStatus); the request is
// OVER_LIMIT when a descriptor that is not a quota is, or all its quota
// descriptors are (service/ratelimit.go).
type refCounter struct {
	count map[string]uint64
	stop  bool
}

type refLimit struct {
	key   string
	limit uint64
	quota bool
}

func (c *refCounter) decide(limits []refLimit, values []string, hits []uint64) (rlsv3.RateLimitResponse_Code, []rlsv3.RateLimitResponse_Code, []uint32) {
	codes, remaining := make([]rlsv3.RateLimitResponse_Code, len(limits)), make([]uint32, len(limits))
	for i := range codes {
		codes[i] = ok
	}
	add := hits
	if c.stop {
		add = make([]uint64, len(hits))
		goesOver := false
		for i, l := range limits {
			if c.count[l.key+"_"+values[i]]+hits[i] > l.limit {
				add[i], goesOver = hits[i], true
			}
		}
		if !goesOver {
			add = hits
		}
	}
	overLimit, quotas, quotaOver := false, 0, 0
	for i, l := range limits {
		k := l.key + "_" + values[i]
		c.count[k] += add[i]
		if l.quota {
			quotas++
		}
		if c.count[k] > l.limit {
			codes[i] = over
			if l.quota {
				quotaOver++
			} else {
				overLimit = true
			}
			continue
		}
		remaining[i] = uint32(l.limit - c.count[k])
	}
	if overLimit || quotas > 0 && quotas == quotaOver {
		return over, codes, remaining
	}
	return ok, codes, remaining
}

// TestEveryHitMatchesFixedWindow: from fresh counters, within one window
// (and less time than one token takes to come back), the reference's
// counter and every_hit buckets give every request the same overall code
// and every descriptor the same code and limit_remaining, whatever the
// hits (hits_addend 0 checks, hits above the limit, a descriptor twice in
// a request, the request's hits_addend); so do the reference with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and stop_when_over buckets,
// for requests without quota descriptors and without a descriptor twice
// (docs/reference-format.md says how those differ).
func TestEveryHitMatchesFixedWindow(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", stop), func(t *testing.T) { testMatchesFixedWindow(t, stop) })
	}
}

func testMatchesFixedWindow(t *testing.T, stop bool) {
	const file = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: q2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	limits := []refLimit{{"a", 5, false}, {"b", 3, false}, {"q1", 4, true}, {"q2", 2, true}}
	var charge *policy.Charge
	if stop {
		limits, charge = limits[:2], new(policy.StopWhenOver)
	}
	rapid.Check(t, func(rt *rapid.T) {
		f := newCompatFixture(t, compileReference(t, file, charge))
		ref := &refCounter{count: map[string]uint64{}, stop: stop}
		elapsed := time.Duration(0)
		for n := range rapid.IntRange(1, 30).Draw(rt, "requests") {
			// a's token takes 12 s to come back: stay below it.
			step := time.Duration(rapid.Int64Range(0, int64(12*time.Second-elapsed)-1).Draw(rt, "step"))
			elapsed += step
			f.clk.Add(step)
			reqHits := uint32(rapid.IntRange(0, 3).Draw(rt, "request hits_addend"))
			var (
				ls     []refLimit
				values []string
				hs     []uint64
				ds     []*ratelimitv3.RateLimitDescriptor
			)
			seen := map[string]bool{}
			for range rapid.IntRange(1, 4).Draw(rt, "descriptors") {
				l := rapid.SampledFrom(limits).Draw(rt, "limit")
				v := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "value")
				if stop && seen[l.key+v] {
					continue
				}
				seen[l.key+v] = true
				d := descr(l.key, v)
				h := uint64(max(1, reqHits)) // the reference's default: the request's, at least 1
				if own := rapid.IntRange(-1, 8).Draw(rt, "hits_addend"); own >= 0 {
					d.HitsAddend, h = wrapperspb.UInt64(uint64(own)), uint64(own)
				}
				ls, values, hs, ds = append(ls, l), append(values, v), append(hs, h), append(ds, d)
			}
			resp, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds, HitsAddend: reqHits})
			if err != nil {
				rt.Fatal(err)
			}
			code, codes, remaining := ref.decide(ls, values, hs)
			if resp.OverallCode != code {
				rt.Fatalf("request %d %v: overall %v, the reference %v (%v)", n, ds, resp.OverallCode, code, resp)
			}
			for i, st := range resp.Statuses {
				if st.Code != codes[i] || st.LimitRemaining != remaining[i] {
					rt.Fatalf("request %d %v: status %d %v, the reference %v remaining %d", n, ds, i, st, codes[i], remaining[i])
				}
			}
		}
	})
}
