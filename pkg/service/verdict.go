package service

import (
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Result is what became of one descriptor. Its String is the "result"
// label of tokengate_decisions_total.
type Result uint8

const (
	// ResultRequestID is the descriptor that carries the request id: OK,
	// not a decision, not counted.
	ResultRequestID Result = iota
	// ResultNoRule: no rule matched; OK, nothing consumed.
	ResultNoRule
	// ResultOK: allowed and charged (an unlimited rule: allowed).
	ResultOK
	// ResultOverLimit: the bucket cannot cover the cost now; on a
	// post-paid rule, a check found no whole token, or a report (charged
	// all the same) left the balance below zero.
	ResultOverLimit
	// ResultRefused: no wait makes it affordable (a cost above max_cost or
	// capacity, a value too long); OVER_LIMIT with a Reason.
	ResultRefused
	// ResultShadowOverLimit: a shadow rule that would have refused; OK.
	ResultShadowOverLimit
	// ResultStoreError: the store failed and the rule's on_store_error
	// answered (Degraded).
	ResultStoreError
	// ResultReplaced: the rule it matched is one that another descriptor's
	// rule replaces; OK as if no rule matched, nothing consumed.
	ResultReplaced
	numResults
)

var resultLabels = [numResults]string{
	ResultRequestID:       "",
	ResultNoRule:          metrics.ResultNoRule,
	ResultOK:              metrics.ResultOK,
	ResultOverLimit:       metrics.ResultOverLimit,
	ResultRefused:         metrics.ResultRefused,
	ResultShadowOverLimit: metrics.ResultShadowOverLimit,
	ResultStoreError:      metrics.ResultStoreError,
	ResultReplaced:        metrics.ResultReplaced,
}

// String is the result's metric label ("" for ResultRequestID).
func (r Result) String() string { return resultLabels[r] }

// Verdict is the decision of one descriptor, made once: the response's
// status and headers, the front doors' headers, the dynamic metadata, the
// decision log, the span and the metrics are all written from it.
type Verdict struct {
	// Rule is the rule the descriptor matched; nil for ResultNoRule,
	// ResultReplaced and ResultRequestID.
	Rule *policy.Rule
	// Band is which of the rule's limits (policy.Rule.Bands) the verdict
	// is of: the one that refused, else the one with the fewest tokens
	// left (bands.go); 0 for a rule of one limit, or without a bucket.
	Band   int
	Result Result
	// Code is the descriptor's answer: OVER_LIMIT for an enforced rule
	// over its limit, refused, or denied by on_store_error; else OK. A
	// quota descriptor's OVER_LIMIT refuses the request only with the
	// request's other quota descriptors (quota.go).
	Code rlsv3.RateLimitResponse_Code
	// Cost is what the descriptor asked of its bucket (negative: a
	// refund); 0 without a bucket.
	Cost int64
	// Remaining are the whole tokens the store (or, while it fails, the
	// local budget) says are left, a cost above max_cost's bucket's too;
	// 0 without an answer, 2^32-1 for an unlimited rule (as
	// envoyproxy/ratelimit answers).
	Remaining int64
	// Reset is the time until the bucket is full when allowed, the wait
	// rounded up to whole seconds when denied; HasReset is false when no
	// answer says (no bucket, a refusal, a failed store without a local
	// budget).
	Reset    time.Duration
	HasReset bool
	// Retry is the wait, not rounded, before an enforced OVER_LIMIT of a
	// bucket becomes affordable; 0 for every other verdict. The response's
	// retry-after is the longest of a request's.
	Retry time.Duration
	// Reason says why the descriptor can never pass as it is (ResultRefused).
	Reason string
	// Debt is how far below zero the bucket is after the decision, in
	// whole tokens (a post-paid rule's reports take it there); Forgiven
	// what of a report was beyond the rule's max_debt and not charged (0
	// for a replayed answer, which charged nothing; of a rule of several
	// limits, the most any of them did not charge).
	Debt, Forgiven int64

	info    *ruleInfo // Rule's entry in the rule table; nil without a rule
	counted bool      // Remaining is the store's answer: observed in tokengate_remaining_ratio
	quota   bool      // a quota descriptor the store decided: it refuses only with the others (quota.go)
}

// Degraded reports whether the store failed and on_store_error answered.
func (v *Verdict) Degraded() bool { return v.Result == ResultStoreError }

// LimitRemaining is Remaining as the status's limit_remaining says it:
// 32 bits, so at most 2^32-1.
func (v *Verdict) LimitRemaining() uint32 { return uint32(min(max(v.Remaining, 0), 1<<32-1)) }

// Limit is the current_limit of the descriptor's status: the rule's limit
// name and its rate in Envoy's units. Shared by every status of the rule:
// read only. Nil without a rule, and for an unlimited one.
func (v *Verdict) Limit() *rlsv3.RateLimitResponse_RateLimit {
	if v.info == nil || v.Rule.Unlimited {
		return nil
	}
	return v.info.limits[v.Band]
}

// notable reports whether the verdict is one the dynamic metadata and the
// info-level decision log describe: limited, or answered by on_store_error.
func (v *Verdict) notable() bool {
	return v.Code == rlsv3.RateLimitResponse_OVER_LIMIT || v.Degraded()
}

// decision is the request's Decision, in the request state.
func (rs *reqState) decision(resp *rlsv3.RateLimitResponse) *Decision {
	rs.rules = rs.rules[:0]
	for i := range rs.verdicts {
		rs.rules = append(rs.rules, rs.verdicts[i].Rule)
	}
	rs.dec = Decision{Response: resp, Verdicts: rs.verdicts, Rules: rs.rules, Reason: rs.reason}
	return &rs.dec
}

// judge decides every descriptor's verdict from the plan and the store's
// answers, into rs.verdicts; t is the plan's rule table (nil: verdicts
// with no Limit, for a plan that answers no one: the candidate's).
func (rs *reqState) judge(t *ruleTable) []Verdict {
	rs.verdicts = rs.verdicts[:0]
	for i := range rs.descs {
		rs.verdicts = append(rs.verdicts, rs.verdict(i, t))
	}
	return rs.verdicts
}

func (rs *reqState) verdict(i int, t *ruleTable) Verdict {
	ds := &rs.descs[i]
	v := Verdict{Rule: ds.rule, Code: rlsv3.RateLimitResponse_OK, Cost: ds.cost}
	switch {
	case ds.isID:
		v.Result = ResultRequestID
		return v
	case ds.rule == nil && ds.replaced:
		v.Result = ResultReplaced
		return v
	case ds.rule == nil:
		v.Result = ResultNoRule
		return v
	}
	if t != nil {
		v.info = t.rules[ds.rule]
	}
	if ds.rule.Unlimited {
		// As envoyproxy/ratelimit answers: no limit, all remaining.
		v.Result, v.Remaining = ResultOK, 1<<32-1
		return v
	}
	rs.answer(ds, &v)
	if ds.quotaOver && v.Result == ResultOK {
		// Checked at cost 0, not charged (quota.go).
		_, r := ds.deciding(rs.batch(ds.rule).results)
		v.Result, v.Retry = ResultOverLimit, time.Duration(r.RetryAfter)
	}
	v.quota = ds.isQuota() && rs.enforced.err == nil
	if v.Result != ResultOK && !(v.Result == ResultStoreError && rs.fallbackAllows(ds)) {
		v.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if ds.rule.Shadow {
		// A shadow rule whose store failed stays a store_error: counted
		// as shadow_over_limit it would pass for a bucket run dry. Its
		// wait is not the client's.
		if v.Code == rlsv3.RateLimitResponse_OVER_LIMIT && v.Result != ResultStoreError {
			v.Result = ResultShadowOverLimit
		}
		v.Code, v.Retry = rlsv3.RateLimitResponse_OK, 0
	}
	return v
}

// answer fills v's result, remaining tokens, reset and retry times from the
// store's answer, the local budget's while the store failed, or the
// refusal made before asking.
func (rs *reqState) answer(ds *desc, v *Verdict) {
	b := rs.batch(ds.rule)
	switch {
	case ds.refusal != "":
		v.Result, v.Reason = ResultRefused, ds.refusal
		if ds.item >= 0 && b.err == nil {
			var r store.Result
			ds.band, r = ds.deciding(b.results)
			v.Band, v.Remaining = ds.band, r.Remaining // checked at cost 0 (plan)
		}
		return
	case b.err != nil:
		v.Result = ResultStoreError
		if r, ok := rs.localResult(ds); ok {
			v.Band, v.Remaining = ds.band, r.Remaining
			v.Reset, v.HasReset = time.Duration(r.ResetAfter), true
			if !r.Allowed {
				v.Reset, v.Retry = ceilDuration(r.RetryAfter), time.Duration(r.RetryAfter)
			}
		}
		return
	}
	var r store.Result
	ds.band, r = ds.deciding(b.results)
	v.Band, v.Remaining, v.Debt, v.counted = ds.band, r.Remaining, r.Debt, true
	if !b.out.Replayed {
		v.Forgiven = r.Forgiven
	}
	switch {
	case r.Never:
		v.Result, v.Reason = ResultRefused, neverReason(b.req.Items[ds.item+ds.band], ds.rule)
	case r.Allowed:
		v.Result = ResultOK
		v.Reset, v.HasReset = time.Duration(r.ResetAfter), true
	default:
		// Envoy truncates the reset to whole seconds for X-RateLimit-Reset.
		v.Result = ResultOverLimit
		v.Reset, v.HasReset, v.Retry = ceilDuration(r.RetryAfter), true, time.Duration(r.RetryAfter)
	}
}

func neverReason(it store.Item, r *policy.Rule) string {
	return fmt.Sprintf("cost %d exceeds capacity %d of rule %s/%s", it.Cost, it.Version.Params.Capacity(), r.Domain, r.Name)
}

// ceilDuration rounds a positive wait in ns up to whole seconds.
func ceilDuration(ns int64) time.Duration {
	return time.Duration(CeilSeconds(time.Duration(ns))) * time.Second
}
