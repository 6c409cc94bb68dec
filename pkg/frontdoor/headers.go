package frontdoor

import (
	"math"
	"net/http"
	"strconv"
	"strings"

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
//   - the headers ShouldRateLimit adds: Retry-After, x-tokengate-reason,
//     x-tokengate-degraded.
func rateLimitHeaders(dec *service.Decision) (hs []header, violated []string, reason string) {
	var (
		policyItems, limitItems, xPolicy []string
		closest                          *rlsv3.RateLimitResponse_DescriptorStatus
	)
	for i, st := range dec.Response.Statuses {
		r := dec.Rules[i]
		if r == nil || r.Unlimited || r.Shadow || st.CurrentLimit == nil {
			continue
		}
		name := sfString(r.Name)
		params := r.Version.Params
		rate := params.Rate()
		fill := math.Ceil(float64(params.Capacity()) * float64(rate.Per()) / float64(rate.Tokens()) / 1e9)
		policyItems = append(policyItems, name+";q="+strconv.FormatInt(params.Capacity(), 10)+";w="+strconv.FormatInt(int64(min(max(fill, 1), 1<<40)), 10))
		limitItems = append(limitItems, name+";r="+strconv.FormatUint(uint64(st.LimitRemaining), 10)+";t="+strconv.FormatInt(ceilSeconds(st.DurationUntilReset.AsDuration().Nanoseconds()), 10))
		if closest == nil || st.LimitRemaining < closest.LimitRemaining {
			closest = st
		}
		if w := unitSeconds(st.CurrentLimit.Unit); w > 0 {
			xPolicy = append(xPolicy, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)+";w="+strconv.Itoa(w)+";name="+name)
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			violated = append(violated, r.Name)
		}
	}
	if closest != nil {
		hs = append(hs,
			header{HeaderRateLimitPolicy, strings.Join(policyItems, ", ")},
			header{HeaderRateLimit, strings.Join(limitItems, ", ")},
			header{HeaderXRateLimitLimit, strings.Join(append([]string{strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)}, xPolicy...), ", ")},
			header{HeaderXRateLimitRemain, strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			header{HeaderXRateLimitReset, strconv.FormatInt(closest.DurationUntilReset.GetSeconds(), 10)},
		)
	}
	for _, h := range dec.Response.ResponseHeadersToAdd {
		hs = append(hs, header{http.CanonicalHeaderKey(h.Key), h.Value})
		if h.Key == service.HeaderReason {
			reason = h.Value
		}
	}
	return hs, violated, reason
}

// sfString writes s as a structured-field string (RFC 9651): printable
// ASCII in quotes, with quote and backslash escaped; other bytes become "?".
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
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

// ceilSeconds rounds a duration up to whole seconds.
func ceilSeconds(ns int64) int64 {
	s := ns / 1e9
	if ns%1e9 > 0 {
		s++
	}
	return s
}
