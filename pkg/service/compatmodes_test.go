package service

// The compat modes: envoyproxy/ratelimit's service-wide answers
// (compatmodes.go).

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func newModeFixture(t *testing.T, opts Options) *compatFixture {
	return newCompatFixtureWith(t, readCompat(t, compatData+"integration"), opts)
}

// SHADOW_MODE: the overall code is OK, each status says what it would be,
// and the decision is charged as usual (the bucket runs dry all the same).
func TestShadowAll(t *testing.T) {
	f := newModeFixture(t, Options{ShadowAll: true})
	for i := range 22 {
		r := f.call("another", descr("key2", "x"))
		code, remaining := ok, uint32(19-i)
		if i >= 20 {
			code, remaining = over, 0
		}
		f.expect("key2", r, ok, want{code, 20, minute, remaining, ""})
		if header(r, HeaderRetryAfter) != "" {
			t.Fatalf("#%d: retry-after on a shadowed answer: %v", i, r)
		}
	}
}

// LIMIT_RESPONSE_HEADERS_ENABLED: the headers of the descriptor nearest its
// limit, and of the one over it once one is.
func TestLimitHeaders(t *testing.T) {
	h := &LimitHeaders{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	f := newModeFixture(t, Options{LimitHeaders: h})
	get := func(r *rlsv3.RateLimitResponse) [3]string {
		return [3]string{header(r, h.Limit), header(r, h.Remaining), header(r, h.Reset)}
	}
	// key2: 20 a minute, key3: 10 an hour; key3 is nearer its limit.
	r := f.call("another", descr("key2", "a"), descr("key3", "a"))
	if got := get(r); got != [3]string{"10", "9", "360"} {
		t.Fatalf("first: %v (%v)", got, r)
	}
	for range 9 {
		f.call("another", descr("key3", "a"))
	}
	// key3's 11th hit is counted, as the reference counts it: a hit fits
	// again once two tokens are back.
	r = f.call("another", descr("key2", "a"), descr("key3", "a"))
	if got := get(r); r.OverallCode != over || got != [3]string{"10", "0", "720"} {
		t.Fatalf("over: %v (%v)", got, r)
	}
	// No limit, no headers.
	if r := f.call("nosuchdomain", descr("k", "v")); get(r) != [3]string{} {
		t.Fatalf("no limit: %v", r)
	}
}
