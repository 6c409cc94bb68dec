package service

import (
	"math/bits"

	"github.com/prometheus/client_golang/prometheus"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

// ruleTable is what the response needs per rule of one policy, built once
// when the policy changes: the current_limit message every status of the
// rule shares (read-only), and its metric handles, so that the hot path
// does no label lookups.
type ruleTable struct {
	pol      *policy.Policy
	rules    map[*policy.Rule]*ruleInfo
	noRule   map[string]prometheus.Counter // by domain
	replaced map[string]prometheus.Counter // by domain
}

type ruleInfo struct {
	// limits and capacities are by band (policy.Rule.Bands); limits has
	// one entry for a rule without a bucket.
	limits     []*rlsv3.RateLimitResponse_RateLimit
	capacities []float64
	remaining  prometheus.Observer
	forgiven   prometheus.Counter // a post-paid rule's; nil for the others
	// unreserved: a reserve rule's checks that held nothing; nil for the
	// others.
	unreserved prometheus.Counter
	result     [numResults]prometheus.Counter // by Result; nil for ResultRequestID, ResultNoRule and ResultReplaced
	// While the store fails: tokengate_store_fallbacks_total of the
	// rule's mode, and tokengate_store_error_answers_total by answer.
	fallback     prometheus.Counter
	storeErrorOK prometheus.Counter
	storeErrorNo prometheus.Counter // answered OVER_LIMIT
	// byDescriptor: the rule's decisions are also counted by descriptor
	// (policy.Rule.DescriptorMetric, bounded by metrics.CountDescriptor).
	byDescriptor bool
	// The rule's name and domain as dynamic metadata values (metadata.go),
	// shared by every response: read only.
	metaRule, metaDomain *structpb.Value
}

func (s *Service) ruleTable(pol *policy.Policy) *ruleTable {
	if t := s.rules.Load(); t != nil && t.pol == pol {
		return t
	}
	// Two requests may build the same table at a reload; either is right.
	t := newRuleTable(pol, s.opts.Metrics)
	s.rules.Store(t)
	return t
}

func newRuleTable(pol *policy.Policy, m *metrics.Metrics) *ruleTable {
	t := &ruleTable{pol: pol, rules: map[*policy.Rule]*ruleInfo{}, noRule: map[string]prometheus.Counter{}, replaced: map[string]prometheus.Counter{}}
	for _, d := range pol.Domains() {
		t.noRule[d] = m.Decisions.WithLabelValues(d, "", metrics.ResultNoRule)
		t.replaced[d] = m.Decisions.WithLabelValues(d, "", metrics.ResultReplaced)
		for _, r := range pol.Rules(d) {
			info := &ruleInfo{limits: currentLimits(r), byDescriptor: r.DescriptorMetric(),
				metaRule: structpb.NewStringValue(r.Name), metaDomain: structpb.NewStringValue(d)}
			for _, res := range []Result{ResultOK, ResultOverLimit, ResultRefused, ResultShadowOverLimit, ResultStoreError} {
				info.result[res] = m.Decisions.WithLabelValues(d, r.Name, res.String())
			}
			if r.HasBucket() {
				for _, b := range r.Bands {
					info.capacities = append(info.capacities, float64(b.Version.Params.Capacity()))
				}
				info.remaining = m.Remaining.WithLabelValues(d, r.Name)
				mode := r.OnStoreError.String()
				info.fallback = m.StoreFallbacks.WithLabelValues(mode)
				// Both answers exist from the start, at zero, so that a
				// dashboard's rate of over_limit is 0, not absent.
				info.storeErrorOK = m.StoreErrorAnswers.WithLabelValues(d, r.Name, mode, metrics.AnswerOK)
				info.storeErrorNo = m.StoreErrorAnswers.WithLabelValues(d, r.Name, mode, metrics.AnswerOverLimit)
			}
			if r.PostPaid() {
				info.forgiven = m.Forgiven.WithLabelValues(d, r.Name)
			}
			if r.Reserves() {
				info.unreserved = m.Unreserved.WithLabelValues(d, r.Name)
			}
			t.rules[r] = info
		}
	}
	return t
}

// count records the verdicts of a request of domain in the metrics; a
// rule that asks is counted by descriptor too.
func (rs *reqState) count(t *ruleTable, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, vs []Verdict, m *metrics.Metrics) {
	for i := range vs {
		v := &vs[i]
		switch v.Result {
		case ResultRequestID:
			continue
		case ResultNoRule:
			t.noRuleCounter(domain, m).Inc()
			continue
		case ResultReplaced:
			t.replaced[domain].Inc() // only a domain of the policy has rules to replace
			continue
		}
		info := v.info
		if v.counted {
			info.remaining.Observe(float64(v.Remaining) / info.capacities[v.Band])
		}
		if v.Degraded() {
			info.countStoreError(v.Code)
		}
		if v.Forgiven > 0 {
			info.forgiven.Add(float64(v.Forgiven))
		}
		if rs.descs[i].unreserved {
			info.unreserved.Inc()
		}
		info.result[v.Result].Inc()
		if info.byDescriptor && !v.Rule.Unlimited {
			m.CountDescriptor(domain, v.Rule.Name, v.Rule.MetricLabel(rs.entriesOf(descriptors[i])), v.Result.String())
		}
	}
}

// currentLimits are what the rule's statuses say in current_limit, by
// band: the file's requests_per_unit and unit when it gave them (a rule of
// one band), else each band's refill rate in the closest Envoy unit. A
// rule without a bucket has one, with only a name.
func currentLimits(r *policy.Rule) []*rlsv3.RateLimitResponse_RateLimit {
	ls := make([]*rlsv3.RateLimitResponse_RateLimit, max(len(r.Bands), 1))
	for i := range ls {
		l := &rlsv3.RateLimitResponse_RateLimit{Name: r.Limit.Name}
		switch {
		case r.Limit.Given:
			l.RequestsPerUnit, l.Unit = r.Limit.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(r.Limit.Unit)
		case r.HasBucket() && r.Bands[i].Budget != nil:
			// A calendar budget: its tokens per its period.
			b := &r.Bands[i]
			l.RequestsPerUnit = uint32(min(b.Version.Params.Capacity(), 1<<32-1))
			l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(b.Budget.Per.Unit())
		case r.HasBucket():
			l.RequestsPerUnit, l.Unit = envoyRate(r.Bands[i].Version.Params.Rate())
		}
		ls[i] = l
	}
	return ls
}

// countStoreError counts a descriptor of the rule whose store failed, by
// the code on_store_error answered it with.
func (info *ruleInfo) countStoreError(code rlsv3.RateLimitResponse_Code) {
	info.fallback.Inc()
	if code == rlsv3.RateLimitResponse_OVER_LIMIT {
		info.storeErrorNo.Inc()
	} else {
		info.storeErrorOK.Inc()
	}
}

// noRuleCounter counts a descriptor no rule matched; a domain the policy
// does not know is counted as "" (label values come only from the policy).
func (t *ruleTable) noRuleCounter(domain string, m *metrics.Metrics) prometheus.Counter {
	if c, ok := t.noRule[domain]; ok {
		return c
	}
	return m.Decisions.WithLabelValues("", "", metrics.ResultNoRule)
}

var envoyUnits = [...]struct {
	ns   uint64
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{1e9, rlsv3.RateLimitResponse_RateLimit_SECOND},
	{60e9, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{3600e9, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{86400e9, rlsv3.RateLimitResponse_RateLimit_DAY},
}

// envoyRate expresses a rate in the closest Envoy unit: the smallest of
// second, minute, hour and day in which it is a whole number of tokens, or
// failing that the rounded number of tokens per day (at least 1).
func envoyRate(r bucket.Rate) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
	n, per := uint64(r.Tokens()), uint64(r.Per())
	for _, u := range envoyUnits {
		if hi, lo := bits.Mul64(u.ns, n); hi == 0 && lo%per == 0 && lo/per <= 1<<32-1 {
			return uint32(lo / per), u.unit
		}
	}
	day := envoyUnits[len(envoyUnits)-1]
	perDay := (float64(n)*float64(day.ns)/float64(per) + 0.5)
	return uint32(min(max(perDay, 1), 1<<32-1)), day.unit
}
