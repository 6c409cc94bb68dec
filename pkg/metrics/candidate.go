package metrics

import "github.com/prometheus/client_golang/prometheus"

// Disagreements between the live policy's answer to a request and the
// candidate's, the values of the "kind" label of
// tokengate_candidate_disagreements_total.
const (
	LiveAllowedCandidateRejected = "live_allowed_candidate_rejected"
	LiveRejectedCandidateAllowed = "live_rejected_candidate_allowed"
)

// Results lists the values of the "result" label of
// tokengate_candidate_decisions_total, and of tokengate_decisions_total
// but for ResultReplaced (which the candidate counts as ResultNoRule: a
// replaced rule answers nothing).
var Results = []string{ResultOK, ResultOverLimit, ResultRefused, ResultShadowOverLimit, ResultStoreError, ResultNoRule}

// Candidate are the metrics of the candidate policy (serve
// --candidate-policy).
type Candidate struct {
	// Decisions counts the candidate's descriptor decisions as Decisions
	// counts the live policy's, with the same results.
	Decisions *prometheus.CounterVec // domain, rule, result
	// Disagreements counts requests the two policies answered differently,
	// both from their stores' answers.
	Disagreements *prometheus.CounterVec // domain, kind
	// Skipped counts requests not decided under the candidate, because
	// too many were being decided already (a slow candidate store).
	Skipped    prometheus.Counter
	Reloads    *prometheus.CounterVec // result: success, failure, removed
	PolicyInfo *prometheus.GaugeVec   // revision, sha256; no series: no candidate
}

// NewCandidate creates the candidate's metrics and registers them on reg.
func NewCandidate(reg prometheus.Registerer) *Candidate {
	m := &Candidate{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_candidate_decisions_total",
			Help: "Descriptor decisions of the candidate policy, by domain, rule and result (the results of tokengate_decisions_total); they never change an answer.",
		}, []string{"domain", "rule", "result"}),
		Disagreements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_candidate_disagreements_total",
			Help: "Requests the live and the candidate policy answered differently, by domain and kind (live_allowed_candidate_rejected, live_rejected_candidate_allowed).",
		}, []string{"domain", "kind"}),
		Skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_candidate_skipped_total",
			Help: "Requests not decided under the candidate policy because too many were being decided already (a slow candidate store): they are in neither its decisions nor its buckets.",
		}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_candidate_policy_reloads_total",
			Help: "Candidate policy loads by result (success, failure: the last good candidate or none kept, removed: no candidate).",
		}, []string{"result"}),
		PolicyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tokengate_candidate_policy_info",
			Help: "The candidate policy decided beside the live one: 1 for its revision and sha256; no series while there is none.",
		}, []string{"revision", "sha256"}),
	}
	reg.MustRegister(m.Decisions, m.Disagreements, m.Skipped, m.Reloads, m.PolicyInfo)
	return m
}

// SetPolicy records the candidate now loaded; with ok false, that there
// is none.
func (m *Candidate) SetPolicy(revision int64, sha256 string, ok bool) {
	if !ok {
		m.PolicyInfo.Reset()
		return
	}
	setPolicyInfo(m.PolicyInfo, revision, sha256)
}
