// Package metrics defines tokengate's Prometheus metrics. Everything is
// created on an injected prometheus.Registerer (no globals), and label
// values come only from the policy (domain, rule) and from fixed sets
// (result, reason), never from request values, with one bounded exception:
// the descriptor label of tokengate_descriptor_decisions_total, for the
// rules that ask for it, at most MaxDescriptorSeries values per rule.
package metrics

import (
	"math"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Decision results, the values of the "result" label.
const (
	ResultOK              = "ok"
	ResultOverLimit       = "over_limit"
	ResultRefused         = "refused"           // cost above max_cost or capacity, bad value
	ResultShadowOverLimit = "shadow_over_limit" // a shadow rule that would have refused
	ResultStoreError      = "store_error"       // decided by on_store_error
	ResultNoRule          = "no_rule"           // no rule matched: OK, nothing consumed
	ResultReplaced        = "replaced"          // its rule replaced by another of the request's: OK, nothing consumed
)

// Answers to a descriptor whose store failed, the values of the "answer"
// label of tokengate_store_error_answers_total.
const (
	AnswerOK        = "ok"         // on_store_error allow, a local budget that covered it, a shadow rule
	AnswerOverLimit = "over_limit" // on_store_error deny, a spent or failed local budget
)

// Metrics are the collectors the service and server update directly.
type Metrics struct {
	Decisions *prometheus.CounterVec   // domain, rule, result
	Remaining *prometheus.HistogramVec // domain, rule: remaining share of capacity
	// Forgiven counts the tokens of post-paid reports beyond their rule's
	// max_debt, not charged.
	Forgiven *prometheus.CounterVec // domain, rule
	// Unreserved counts the checks of a reserve rule that held nothing:
	// the request carried no request id (pkg/service, reserve.go).
	Unreserved  *prometheus.CounterVec   // domain, rule
	RPCDuration *prometheus.HistogramVec // method, code
	StoreErrors *prometheus.CounterVec   // store
	// StoreFallbacks counts descriptors that on_store_error answered.
	StoreFallbacks *prometheus.CounterVec // mode: deny, allow, local
	// StoreErrorAnswers counts the same descriptors by rule and by the
	// answer on_store_error gave, so that an OVER_LIMIT of a failing store
	// is never mistaken for one of a spent bucket (Decisions' over_limit).
	StoreErrorAnswers *prometheus.CounterVec // domain, rule, mode, answer
	Reloads           *prometheus.CounterVec // result
	// ReloadFailures counts the failures among Reloads by why the file
	// was refused (watch.FailureReason: read, not_regular_file, invalid).
	ReloadFailures *prometheus.CounterVec // reason
	PolicyInfo     *prometheus.GaugeVec   // revision, sha256
	// RevisionDecreases counts policies applied with a lower revision than
	// the one they replaced: rollbacks, or a mistake (SetPolicy).
	RevisionDecreases prometheus.Counter
	lastRevision      atomic.Int64 // of the policy serving; minInt64 before the first
	// InvalidUTF8 counts requests whose strings held invalid UTF-8 and
	// were decoded as bytes; method is FrontDoorRateLimit or
	// FrontDoorExtAuthz.
	InvalidUTF8 *prometheus.CounterVec // method
	// StoreDegraded is 1 while the store cannot decide (on_store_error
	// answering), 0 while it can; set by the server's health check.
	StoreDegraded prometheus.Gauge

	descriptors *descriptorSeries // CountDescriptor
}

// New creates the metrics and registers them, with the Go and process
// collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_decisions_total",
			Help: "Descriptor decisions by domain, rule and result.",
		}, []string{"domain", "rule", "result"}),
		Remaining: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tokengate_remaining_ratio",
			Help:    "Tokens left after a decision, as a share of the bucket's capacity.",
			Buckets: []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 1},
		}, []string{"domain", "rule"}),
		Forgiven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_forgiven_tokens_total",
			Help: "Tokens of post-paid reports beyond their rule's max_debt, not charged, by domain and rule.",
		}, []string{"domain", "rule"}),
		Unreserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_unreserved_checks_total",
			Help: "Checks of a reserve rule that held no tokens (the request carried no request id), by domain and rule.",
		}, []string{"domain", "rule"}),
		RPCDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tokengate_rpc_duration_seconds",
			Help:    "Time to answer an RPC, by method and gRPC code.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3},
		}, []string{"method", "code"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_store_errors_total",
			Help: "Store calls that failed, by store.",
		}, []string{"store"}),
		StoreFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_store_fallbacks_total",
			Help: "Descriptors answered by their rule's on_store_error while the store failed, by mode (deny, allow, local).",
		}, []string{"mode"}),
		StoreErrorAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_store_error_answers_total",
			Help: "Descriptors whose store failed, by domain, rule, the rule's on_store_error mode and the answer it gave (ok, over_limit).",
		}, []string{"domain", "rule", "mode", "answer"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_policy_reloads_total",
			Help: "Policy loads by result (success or failure).",
		}, []string{"result"}),
		ReloadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_policy_reload_failures_total",
			Help: "Policy loads refused, by reason (read, not_regular_file, invalid); the last good policy kept serving.",
		}, []string{"reason"}),
		PolicyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tokengate_policy_info",
			Help: "The policy now serving: 1 for its revision and sha256.",
		}, []string{"revision", "sha256"}),
		RevisionDecreases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_policy_revision_decreases_total",
			Help: "Policies applied with a lower revision than the one they replaced (a rollback applies, as any change does).",
		}),
		InvalidUTF8: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_requests_invalid_utf8_total",
			Help: "Requests with invalid UTF-8 in a string field (a header's bytes), decoded as bytes and decided as usual, by method (ratelimit, ext_authz).",
		}, []string{"method"}),
		StoreDegraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokengate_store_degraded",
			Help: "1 while the store cannot decide and each rule's on_store_error answers (gRPC health service tokengate.store NOT_SERVING), else 0.",
		}),
	}
	m.descriptors = newDescriptorSeries()
	for _, method := range []string{FrontDoorRateLimit, FrontDoorExtAuthz} {
		m.InvalidUTF8.WithLabelValues(method)
	}
	reg.MustRegister(m.Decisions, m.Remaining, m.Forgiven, m.Unreserved, m.RPCDuration, m.StoreErrors, m.StoreFallbacks, m.StoreErrorAnswers,
		m.Reloads, m.ReloadFailures, m.PolicyInfo, m.RevisionDecreases, m.InvalidUTF8, m.StoreDegraded, m.descriptors.vec,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.lastRevision.Store(math.MinInt64)
	return m
}

// SetPolicy records the policy now serving in tokengate_policy_info, and
// counts a revision lower than the one before in RevisionDecreases; it
// reports whether it was lower.
func (m *Metrics) SetPolicy(revision int64, sha256 string) (decreased bool) {
	prev := m.lastRevision.Swap(revision)
	decreased = prev != math.MinInt64 && revision < prev
	if decreased {
		m.RevisionDecreases.Inc()
	}
	setPolicyInfo(m.PolicyInfo, revision, sha256)
	return decreased
}

// setPolicyInfo leaves g with one series, 1 for revision and sha256.
func setPolicyInfo(g *prometheus.GaugeVec, revision int64, sha256 string) {
	g.Reset()
	g.WithLabelValues(strconv.FormatInt(revision, 10), sha256).Set(1)
}
