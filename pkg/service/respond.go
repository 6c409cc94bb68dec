package service

import (
	"cmp"
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokengate/tokengate/pkg/metrics"
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

// respond builds the answer: one status per descriptor, in order.
func (sc *scratch) respond(domain string, descriptors []*ratelimitv3.RateLimitDescriptor, t *ruleTable, m *metrics.Metrics) *rlsv3.RateLimitResponse {
	resp, statuses, durations := newResponse(len(sc.descs))
	var (
		over, degraded bool
		retry          int64 // the longest wait of an over-limit descriptor
		reason         string
		quota          quotaTally
	)
	for i := range sc.descs {
		ds := &sc.descs[i]
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		switch {
		case ds.isID:
			continue
		case ds.rule == nil:
			t.noRuleCounter(domain, m).Inc()
			continue
		}
		info := t.rules[ds.rule]
		if ds.rule.Unlimited {
			// As envoyproxy/ratelimit answers: no limit, all remaining.
			st.LimitRemaining = 1<<32 - 1
			info.result[metrics.ResultOK].Inc()
			continue
		}
		st.CurrentLimit = info.limit
		res, why := sc.status(ds, st, &durations[i], info)
		if ds.quotaOver && res == metrics.ResultOK {
			res = metrics.ResultOverLimit // checked at cost 0, not charged
		}
		if res != metrics.ResultOK && !(res == metrics.ResultStoreError && sc.fallbackAllows(ds)) {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if ds.rule.Shadow {
			// A shadow rule whose store failed stays a store_error: counted
			// as shadow_over_limit it would pass for a bucket run dry.
			if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && res != metrics.ResultStoreError {
				res = metrics.ResultShadowOverLimit
			}
			st.Code = rlsv3.RateLimitResponse_OK
		}
		if res == metrics.ResultStoreError {
			info.countStoreError(st.Code)
		}
		isQuota := ds.isQuota() && sc.enforced.err == nil
		if isQuota {
			quota.total++
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			wait := int64(0)
			if res == metrics.ResultOverLimit {
				// Only enforced rules: a shadow rule's wait is not the client's.
				wait = sc.batch(ds.rule).results[ds.item].RetryAfter
			}
			if r, ok := sc.localResult(ds); ok {
				wait = max(wait, r.RetryAfter)
			}
			if isQuota {
				quota.over++
				quota.reason, quota.retry = cmp.Or(quota.reason, why), max(quota.retry, wait)
			} else {
				over = true
				reason, retry = cmp.Or(reason, why), max(retry, wait)
			}
		}
		degraded = degraded || res == metrics.ResultStoreError
		info.result[res].Inc()
		if info.byDescriptor {
			m.CountDescriptor(domain, ds.rule.Name, ds.rule.MetricLabel(sc.entriesOf(descriptors[i])), res)
		}
	}
	// Every quota descriptor over the limit refuses the request; so does a
	// decision that charged nothing (a bucket drained since the check).
	refusedByStore := len(sc.enforced.req.Items) > 0 && sc.enforced.err == nil && !sc.enforced.out.Allowed
	if quota.total > 0 && (quota.over == quota.total || refusedByStore) {
		over = true
		reason, retry = cmp.Or(reason, quota.reason), max(retry, quota.retry)
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case reason != "":
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderReason, Value: reason})
		case retry > 0:
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(ceilSeconds(retry), 10)})
		}
	}
	if degraded {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: HeaderDegraded, Value: "store-error"})
	}
	return resp
}

// quotaTally counts a request's quota descriptors (quota.go) and how many
// are over the limit, with the reason and wait of those.
type quotaTally struct {
	total, over int
	reason      string
	retry       int64
}

// status fills st's remaining tokens and reset time from the store's answer
// and returns the decision's result label, with the reason of a refusal.
func (sc *scratch) status(ds *desc, st *rlsv3.RateLimitResponse_DescriptorStatus, d *durationpb.Duration, info *ruleInfo) (string, string) {
	b := sc.batch(ds.rule)
	switch {
	case ds.refusal != "":
		return metrics.ResultRefused, ds.refusal
	case b.err != nil:
		if r, ok := sc.localResult(ds); ok {
			st.LimitRemaining = uint32(min(r.Remaining, 1<<32-1))
			ns := r.ResetAfter
			if !r.Allowed {
				ns = ceilSeconds(r.RetryAfter) * 1e9
			}
			setDuration(d, ns)
			st.DurationUntilReset = d
		}
		return metrics.ResultStoreError, ""
	}
	r := b.results[ds.item]
	st.LimitRemaining = uint32(min(r.Remaining, 1<<32-1))
	info.remaining.Observe(float64(r.Remaining) / info.capacity)
	switch {
	case r.Never:
		return metrics.ResultRefused, fmt.Sprintf("cost %d exceeds capacity %d of rule %s/%s",
			b.req.Items[ds.item].Cost, ds.rule.Version.Params.Capacity(), ds.rule.Domain, ds.rule.Name)
	case r.Allowed:
		setDuration(d, r.ResetAfter)
		st.DurationUntilReset = d
		return metrics.ResultOK, ""
	}
	// Envoy truncates this to whole seconds for X-RateLimit-Reset.
	setDuration(d, ceilSeconds(r.RetryAfter)*1e9)
	st.DurationUntilReset = d
	return metrics.ResultOverLimit, ""
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
