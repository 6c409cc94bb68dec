package service

// "compat" means envoyproxy/ratelimit's contract. Two answers of
// envoyproxy/ratelimit's that its users switch on for the whole service
// (tokengate's --shadow-all and --limit-headers, the reference's
// SHADOW_MODE and LIMIT_RESPONSE_HEADERS_ENABLED). Both act on the
// response once the decision is made, so the decision path is the same
// with them or without.

import (
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// LimitHeaders names the three headers that Options.LimitHeaders adds.
type LimitHeaders struct {
	Limit, Remaining, Reset string
}

// addLimitHeaders adds h's headers from the descriptor nearest its limit,
// chosen as the reference chooses it: the last one over the limit, else
// the first with the fewest tokens left, among those with a limit (an
// unlimited descriptor, or one no rule matched, has none). Limit is the
// rule's requests_per_unit (current_limit), Remaining the tokens left,
// Reset its duration_until_reset in whole seconds, rounded up: for a token
// bucket that is when it is full again, for the reference the end of the
// fixed window.
func addLimitHeaders(resp *rlsv3.RateLimitResponse, h *LimitHeaders) {
	var near *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.Statuses {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			near = st
		case near == nil || near.Code != rlsv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < near.LimitRemaining:
			near = st
		}
	}
	if near == nil {
		return
	}
	reset := CeilSeconds(near.DurationUntilReset.AsDuration())
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: h.Limit, Value: strconv.FormatUint(uint64(near.CurrentLimit.RequestsPerUnit), 10)},
		&corev3.HeaderValue{Key: h.Remaining, Value: strconv.FormatUint(uint64(near.LimitRemaining), 10)},
		&corev3.HeaderValue{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	)
}

// shadowAll turns an OVER_LIMIT answer into OK, as the reference's global
// shadow mode does: each descriptor's status still says OVER_LIMIT, the
// decision was made and charged as usual, and the request goes through, so
// the headers that tell a refused client when to retry, or why, go.
func shadowAll(resp *rlsv3.RateLimitResponse) {
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		return
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	resp.ResponseHeadersToAdd = slices.DeleteFunc(resp.ResponseHeadersToAdd, func(h *corev3.HeaderValue) bool {
		return h.Key == HeaderRetryAfter || h.Key == HeaderReason
	})
}
