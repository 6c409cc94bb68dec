package service

import (
	"cmp"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Response headers tokengate adds. HeaderReason and HeaderDegraded tell
// the client what is internal (rules, costs, the store's state): only with
// Options.ClientReasonHeader; the dynamic metadata and the decision log
// say the same either way.
const (
	HeaderRetryAfter = "retry-after"
	// HeaderReason says why a request can never be allowed as it is.
	HeaderReason = "x-tokengate-reason"
	// HeaderDegraded marks an answer the store did not make: it failed
	// and the rules' on_store_error decided.
	HeaderDegraded = "x-tokengate-degraded"
)

// respond writes the answer from the verdicts: one status per descriptor,
// in order, the headers of the request as a whole (tell: HeaderReason and
// HeaderDegraded too) and, when a descriptor was limited or degraded, the
// dynamic metadata (metadata.go). It keeps the request's reason in
// rs.reason, for Decision.Reason.
func (rs *reqState) respond(domain string, vs []Verdict, tell bool) *rlsv3.RateLimitResponse {
	top := deciding(vs)
	resp, statuses, durations, x := newResponse(len(vs), top >= 0)
	var (
		over, degraded bool
		retry          time.Duration // the longest wait of an over-limit descriptor
		reason         string
		quota          quotaTally
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
		if v.quota {
			quota.total++
		}
		if v.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if v.quota {
				quota.over++
				quota.reason, quota.retry = cmp.Or(quota.reason, v.Reason), max(quota.retry, v.Retry)
			} else {
				over = true
				reason, retry = cmp.Or(reason, v.Reason), max(retry, v.Retry)
			}
		}
		degraded = degraded || v.Degraded()
	}
	// Every quota descriptor over the limit refuses the request; so does a
	// decision that charged nothing (a bucket drained since the check).
	refusedByStore := len(rs.enforced.req.Items) > 0 && rs.enforced.err == nil && !rs.enforced.out.Allowed
	if quota.total > 0 && (quota.over == quota.total || refusedByStore) {
		over = true
		reason, retry = cmp.Or(reason, quota.reason), max(retry, quota.retry)
	}
	rs.reason = reason
	if top < 0 {
		return resp // neither over the limit nor degraded: no header, no metadata
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case reason != "":
			// It can never pass as it is: no wait to tell, told why
			// only when asked.
			if tell {
				x.addHeader(resp, HeaderReason, reason)
			}
		case retry > 0:
			x.addHeader(resp, HeaderRetryAfter, strconv.FormatInt(CeilSeconds(retry), 10))
		}
	}
	if degraded && tell {
		x.addHeader(resp, HeaderDegraded, "store-error")
	}
	resp.DynamicMetadata = rs.metadata(domain, vs, top, CeilSeconds(retry), &x.meta)
	return resp
}

// quotaTally counts a request's quota descriptors (quota.go) and how many
// are over the limit, with the reason and wait of those.
type quotaTally struct {
	total, over int
	reason      string
	retry       time.Duration
}

// smallResponse holds a whole response of up to 2 descriptors, so that the
// common answer costs one allocation rather than four.
type smallResponse struct {
	resp      rlsv3.RateLimitResponse
	ptrs      [2]*rlsv3.RateLimitResponse_DescriptorStatus
	statuses  [2]rlsv3.RateLimitResponse_DescriptorStatus
	durations [2]durationpb.Duration
}

// limitedParts are what an answer that limited or degraded a descriptor
// adds: its headers (a reason or a retry-after, and the degraded mark: room
// for the first, which is all but a degraded refusal needs) and the
// dynamic metadata.
type limitedParts struct {
	header corev3.HeaderValue
	ptrs   [2]*corev3.HeaderValue
	meta   metaBlock
}

func (x *limitedParts) addHeader(resp *rlsv3.RateLimitResponse, key, value string) {
	h := &x.header
	if n := len(resp.ResponseHeadersToAdd); n > 0 {
		h = new(corev3.HeaderValue)
	}
	h.Key, h.Value = key, value
	resp.ResponseHeadersToAdd = append(x.ptrs[:len(resp.ResponseHeadersToAdd)], h)
}

// newResponse returns an OK response whose n statuses point into statuses,
// and n durations for them to point at; and, when limited, the parts of a
// limited answer. Up to 2 descriptors it is one allocation.
func newResponse(n int, limited bool) (*rlsv3.RateLimitResponse, []rlsv3.RateLimitResponse_DescriptorStatus, []durationpb.Duration, *limitedParts) {
	var (
		resp      *rlsv3.RateLimitResponse
		statuses  []rlsv3.RateLimitResponse_DescriptorStatus
		durations []durationpb.Duration
		x         *limitedParts
		small     *smallResponse
	)
	switch {
	case n > len(smallResponse{}.ptrs):
		resp = new(rlsv3.RateLimitResponse)
		statuses, durations = make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]durationpb.Duration, n)
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
		if limited {
			x = new(limitedParts)
		}
	case limited:
		b := new(struct {
			smallResponse
			limitedParts
		})
		small, x = &b.smallResponse, &b.limitedParts
	default:
		small = new(smallResponse)
	}
	if small != nil {
		resp, statuses, durations = &small.resp, small.statuses[:n], small.durations[:n]
		resp.Statuses = small.ptrs[:n]
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	for i := range statuses {
		resp.Statuses[i] = &statuses[i]
	}
	return resp, statuses, durations, x
}

func setDuration(d *durationpb.Duration, ns int64) {
	d.Seconds, d.Nanos = ns/1e9, int32(ns%1e9)
}

// CeilSeconds is d in whole seconds rounded up, as math.Ceil rounds: the
// seconds of a retry-after or a reset, which must never promise a wait
// shorter than the store's. A decision's waits are never negative; a
// negative d rounds towards zero too (-1.5s is -1, -0.5s is 0).
func CeilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
