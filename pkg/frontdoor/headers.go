package frontdoor

import (
	"math"
	"net/http"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/service"
)

// Header names the front doors answer with.
const (
	HeaderRateLimit          = "RateLimit"
	HeaderRateLimitPolicy    = "RateLimit-Policy"
	HeaderXRateLimitLimit    = "X-RateLimit-Limit"
	HeaderXRateLimitRemain   = "X-RateLimit-Remaining"
	HeaderXRateLimitReset    = "X-RateLimit-Reset"
	problemQuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"
)

// rateLimitHeaders describes a decision to the client. Only limited,
// enforced rules are described (no unlimited or shadow rule, no descriptor
// without a rule).
//
//   - RateLimit-Policy: "rule";q=CAPACITY;w=SECONDS per rule, where SECONDS
//     is the time the bucket takes to fill from empty (rounded up): a token
//     bucket allows q at once and q per w on average.
//   - RateLimit: "rule";r=REMAINING;t=SECONDS per rule: whole tokens left
//     and, allowed, the seconds until the bucket is full again, denied, the
//     seconds until the cost is affordable.
//   - X-RateLimit-Limit/Remaining/Reset exactly as Envoy's ratelimit filter
//     writes them from the same statuses (DRAFT_VERSION_03): the limit of
//     the status with the fewest tokens left, then each rule's
//     requests_per_unit;w=UNIT_SECONDS;name="rule".
//   - the headers ShouldRateLimit adds: Retry-After and, when the service
//     tells clients why, x-tokengate-reason and x-tokengate-degraded.
func rateLimitHeaders(dec *service.Decision) (hs []header, violated []string) {
	// Every value is appended to one buffer, turned into one string and
	// sliced: one allocation for all of them.
	var (
		buf     = make([]byte, 0, 256)
		closest *service.Verdict // the fewest tokens left
		spans   [3][2]int        // RateLimit-Policy, RateLimit, X-RateLimit-Limit's tail
	)
	vs := dec.Verdicts
	limited := func(v *service.Verdict) bool {
		return v.Rule != nil && v.Rule.HasBucket() && !v.Rule.Shadow
	}
	for part := range spans {
		spans[part][0] = len(buf)
		if part == 2 && closest != nil {
			// X-RateLimit-Limit starts with the limit of the status with
			// the fewest tokens left.
			buf = strconv.AppendUint(buf, uint64(closest.Limit().RequestsPerUnit), 10)
		}
		for i := range vs {
			v := &vs[i]
			if !limited(v) {
				continue
			}
			r := v.Rule
			switch part {
			case 0:
				if len(buf) > spans[part][0] {
					buf = append(buf, ", "...)
				}
				band := &r.Bands[v.Band]
				params := band.Version.Params
				var fill float64
				if b := band.Budget; b != nil {
					fill = b.Per.Unit().Duration().Seconds() // a calendar budget's window: its period
				} else {
					rate := params.Rate()
					fill = math.Ceil(float64(params.Capacity()) * float64(rate.Per()) / float64(rate.Tokens()) / 1e9)
				}
				buf = appendSFString(buf, r.Name)
				buf = append(buf, ";q="...)
				buf = strconv.AppendInt(buf, params.Capacity(), 10)
				buf = append(buf, ";w="...)
				buf = strconv.AppendInt(buf, int64(min(max(fill, 1), 1<<40)), 10)
			case 1:
				if len(buf) > spans[part][0] {
					buf = append(buf, ", "...)
				}
				buf = appendSFString(buf, r.Name)
				buf = append(buf, ";r="...)
				buf = strconv.AppendUint(buf, uint64(v.LimitRemaining()), 10)
				buf = append(buf, ";t="...)
				buf = strconv.AppendInt(buf, service.CeilSeconds(v.Reset), 10)
				if closest == nil || v.LimitRemaining() < closest.LimitRemaining() {
					closest = v
				}
				if v.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
					violated = append(violated, r.Name)
				}
			case 2:
				if l := v.Limit(); unitSeconds(l.Unit) > 0 {
					buf = append(buf, ", "...)
					buf = strconv.AppendUint(buf, uint64(l.RequestsPerUnit), 10)
					buf = append(buf, ";w="...)
					buf = strconv.AppendInt(buf, int64(unitSeconds(l.Unit)), 10)
					buf = append(buf, ";name="...)
					buf = appendSFString(buf, r.Name)
				}
			}
		}
		spans[part][1] = len(buf)
	}
	n := len(dec.Response.ResponseHeadersToAdd)
	if closest != nil {
		n += 5
	}
	hs = make([]header, 0, n)
	if closest != nil {
		limitEnd := len(buf)
		buf = strconv.AppendUint(buf, uint64(closest.LimitRemaining()), 10)
		remainEnd := len(buf)
		buf = strconv.AppendInt(buf, int64(closest.Reset/time.Second), 10)
		all := string(buf)
		hs = append(hs,
			header{HeaderRateLimitPolicy, all[spans[0][0]:spans[0][1]]},
			header{HeaderRateLimit, all[spans[1][0]:spans[1][1]]},
			header{HeaderXRateLimitLimit, all[spans[2][0]:spans[2][1]]},
			header{HeaderXRateLimitRemain, all[limitEnd:remainEnd]},
			header{HeaderXRateLimitReset, all[remainEnd:]},
		)
	}
	for _, h := range dec.Response.ResponseHeadersToAdd {
		hs = append(hs, header{canonicalKey(h.Key), h.Value})
	}
	return hs, violated
}

// canonicalKey is http.CanonicalHeaderKey without an allocation for the
// headers ShouldRateLimit adds.
func canonicalKey(k string) string {
	switch k {
	case service.HeaderRetryAfter:
		return "Retry-After"
	case service.HeaderReason:
		return "X-Tokengate-Reason"
	case service.HeaderDegraded:
		return "X-Tokengate-Degraded"
	}
	return http.CanonicalHeaderKey(k)
}

// appendSFString appends s as a structured-field string (RFC 9651):
// printable ASCII in quotes, with quote and backslash escaped; other bytes
// become "?".
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	}
	return 0
}
