package rlqs

import "github.com/prometheus/client_golang/prometheus"

// Label values of metrics that are not rules: a bucket no rule limits, and
// a domain the policy does not have (a stream's domain is the client's).
const (
	labelNoRule        = "_none_"
	labelUnknownDomain = "_unknown_"
)

// The kinds of action sent, the values of the "action" label.
const (
	actionTokenBucket = "token_bucket"
	actionAllowAll    = "allow_all"
	actionDenyAll     = "deny_all"
	actionAbandon     = "abandon"
)

// The reasons a stream or a report is refused, the values of the "reason"
// label of tokengate_rlqs_refused_total.
const (
	refusedStreams = "streams"     // the replica's stream limit
	refusedBuckets = "buckets"     // the stream's bucket limit
	refusedInvalid = "invalid"     // a message Envoy would not send (no domain, a bad bucket id)
	refusedDomain  = "domain_swap" // a later message names another domain
)

type rlqsMetrics struct {
	streams       prometheus.Gauge
	messages      prometheus.Counter
	subscriptions *prometheus.GaugeVec   // domain, rule
	actions       *prometheus.CounterVec // domain, rule, action
	reported      *prometheus.CounterVec // domain, rule, outcome
	leased        *prometheus.CounterVec // domain, rule
	overage       *prometheus.CounterVec // domain, rule
	forgiven      *prometheus.CounterVec // domain, rule
	refused       *prometheus.CounterVec // reason
	storeErrors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *rlqsMetrics {
	dr := []string{"domain", "rule"}
	m := &rlqsMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokengate_rlqs_streams",
			Help: "Open RLQS (rate_limit_quota) streams on this replica.",
		}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_rlqs_reports_total",
			Help: "RLQS usage report messages answered.",
		}),
		subscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tokengate_rlqs_subscribed_buckets",
			Help: "RLQS buckets subscribed, stream by stream, by domain and rule.",
		}, dr),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_assignments_total",
			Help: "RLQS bucket actions sent, by domain, rule and action (token_bucket, allow_all, deny_all, abandon).",
		}, []string{"domain", "rule", "action"}),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_reported_requests_total",
			Help: "Requests Envoy reported over RLQS, by domain, rule and outcome (allowed, denied).",
		}, []string{"domain", "rule", "outcome"}),
		leased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_leased_tokens_total",
			Help: "Tokens taken from buckets for RLQS assignments before Envoy spends them, by domain and rule.",
		}, dr),
		overage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_overage_tokens_total",
			Help: "Reported allowed requests beyond what their assignments had paid, charged as reports, by domain and rule.",
		}, dr),
		forgiven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_forgiven_tokens_total",
			Help: "Overage the bucket could not take (a pre-paid rule below zero, or beyond max_debt), by domain and rule.",
		}, dr),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_rlqs_refused_total",
			Help: "RLQS streams ended by a limit or a bad message, by reason (streams, buckets, invalid, domain_swap).",
		}, []string{"reason"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_rlqs_store_errors_total",
			Help: "Store calls for RLQS leases and overage that failed.",
		}),
	}
	for _, r := range []string{refusedStreams, refusedBuckets, refusedInvalid, refusedDomain} {
		m.refused.WithLabelValues(r)
	}
	reg.MustRegister(m.streams, m.messages, m.subscriptions, m.actions, m.reported, m.leased, m.overage, m.forgiven, m.refused, m.storeErrors)
	return m
}
