package service

import (
	"cmp"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Response headers tokengate adds.
const (
	HeaderRetryAfter = "retry-after"
	// HeaderReason says why a request can never be allowed as it is.
	HeaderReason = "x-tokengate-reason"
	// HeaderDegraded marks an answer the store did not make: it failed
	// and the rules' on_store_error decided.
	HeaderDegraded = "x-tokengate-degraded"
)

// respond writes the answer from the verdicts: one status per descriptor,
// in order, and the headers of the request as a whole.
func respond(vs []Verdict) *rlsv3.RateLimitResponse {
	resp, statuses, durations := newResponse(len(vs))
	var (
		over, degraded bool
		retry          time.Duration // the longest wait of an over-limit descriptor
		reason         string
	)
	for i := range vs {
		v := &vs[i]
		st := &statuses[i]
		st.Code = v.Code
		st.CurrentLimit = v.Limit()
		st.LimitRemaining = v.LimitRemaining()
		if v.HasReset {
			setDuration(&durations[i], int64(v.Reset))
			st.DurationUntilReset = &durations[i]
		}
		if v.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			over = true
			reason = cmp.Or(reason, v.Reason)
			retry = max(retry, v.Retry)
		}
		degraded = degraded || v.Degraded()
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case reason != "":
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderReason, Value: reason})
		case retry > 0:
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(ceilSeconds(int64(retry)), 10)})
		}
	}
	if degraded {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderDegraded, Value: "store-error"})
	}
	return resp
}

// smallResponse holds a whole response of up to 2 descriptors, so that the
// common answer costs one allocation rather than four.
type smallResponse struct {
	resp      rlsv3.RateLimitResponse
	ptrs      [2]*rlsv3.RateLimitResponse_DescriptorStatus
	statuses  [2]rlsv3.RateLimitResponse_DescriptorStatus
	durations [2]durationpb.Duration
}

// newResponse returns an OK response whose n statuses point into statuses,
// and n durations for them to point at.
func newResponse(n int) (*rlsv3.RateLimitResponse, []rlsv3.RateLimitResponse_DescriptorStatus, []durationpb.Duration) {
	var (
		resp      *rlsv3.RateLimitResponse
		statuses  []rlsv3.RateLimitResponse_DescriptorStatus
		durations []durationpb.Duration
	)
	if n <= len(smallResponse{}.ptrs) {
		b := new(smallResponse)
		resp, statuses, durations = &b.resp, b.statuses[:n], b.durations[:n]
		resp.Statuses = b.ptrs[:n]
	} else {
		resp = new(rlsv3.RateLimitResponse)
		statuses, durations = make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]durationpb.Duration, n)
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	for i := range statuses {
		resp.Statuses[i] = &statuses[i]
	}
	return resp, statuses, durations
}

func setDuration(d *durationpb.Duration, ns int64) {
	d.Seconds, d.Nanos = ns/1e9, int32(ns%1e9)
}

// ceilSeconds rounds a positive duration up to whole seconds.
func ceilSeconds(ns int64) int64 {
	s := ns / 1e9
	if ns%1e9 != 0 {
		s++
	}
	return s
}
