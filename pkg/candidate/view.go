package candidate

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tokengate/tokengate/pkg/policy"
)

// SourceKey is the log attribute that names the candidate policy's file.
const SourceKey = "candidate_source"

// View is /debug/candidate.
type View struct {
	// Candidate is the candidate policy now loaded; nil: none.
	Candidate *PolicyView `json:"candidate"`
	// The record below is of the candidate first seen at Since (it is
	// empty until a request is decided under it).
	SinceSeconds float64 `json:"since_seconds"`
	// Requests compared (both stores answered) and disagreements by kind.
	Requests      uint64            `json:"requests"`
	Disagreements map[string]uint64 `json:"disagreements"`
	// Reports are the requests either policy read as a post-paid rule's
	// report, never compared: Envoy ignores their answer.
	Reports    uint64       `json:"reports"`
	Rules      []RuleView   `json:"rules"`
	TopBuckets []BucketView `json:"top_buckets"`
}

// PolicyView names a policy.
type PolicyView struct {
	File     string `json:"file"`
	Revision int64  `json:"revision"`
	SHA256   string `json:"sha256"`
}

// RuleView is one rule of either policy, or a domain's descriptors no rule
// matched (Rule ""): its decisions under each, by result, and the
// disagreements its buckets decided (its policy rejected, the other
// allowed).
type RuleView struct {
	Domain    string            `json:"domain"`
	Rule      string            `json:"rule"`
	Live      map[string]uint64 `json:"live"`
	Candidate map[string]uint64 `json:"candidate"`
	// Reports are how many of the decisions were reports, under each
	// ("live", "candidate"): a report's over_limit was charged, and
	// answered to no one.
	Reports       map[string]uint64 `json:"reports,omitempty"`
	Disagreements map[string]uint64 `json:"disagreements,omitempty"`
}

// BucketView is one bucket of the top list.
type BucketView struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	// Policy is the one whose bucket rejected: live or candidate.
	Policy string `json:"policy"`
	// Bucket is the keyed hash of the bucket's key (Options.KeyHash): the
	// key a decision log line or Envoy's dynamic metadata gives the same
	// bucket, and tokengate explain prints. It never shows the client's
	// values.
	Bucket        string `json:"bucket"`
	Kind          string `json:"kind"`
	Disagreements uint64 `json:"disagreements"`
	// Overcount is the most Disagreements may exceed the truth by (the
	// list is bounded); 0: exact.
	Overcount uint64 `json:"overcount,omitempty"`
}

// View is the record of cand, the candidate now loaded (nil: none), at
// the clock reading now.
func (t *Tracker) View(cand *policy.Policy, now int64) View {
	v := View{Disagreements: map[string]uint64{}, Rules: []RuleView{}, TopBuckets: []BucketView{}}
	for k := range numKinds {
		v.Disagreements[kindNames[k]] = 0
	}
	if cand == nil {
		return v
	}
	v.Candidate = &PolicyView{File: cand.Name(), Revision: cand.Revision(), SHA256: cand.SHA256()}
	st := t.state.Load()
	if st == nil || st.cand != cand {
		return v
	}
	v.SinceSeconds = time.Duration(now - st.since).Seconds()
	v.Requests, v.Reports = st.compared.Load(), st.reports.Load()
	for k := range numKinds {
		v.Disagreements[kindNames[k]] = st.disagreed[k].Load()
	}
	t.mu.Lock()
	rows := append([]*row(nil), st.order...)
	t.mu.Unlock()
	for _, r := range rows {
		rv := RuleView{Domain: r.domain, Rule: r.rule, Live: counts(&r.live), Candidate: counts(&r.cand)}
		for i, side := range [2]string{"live", "candidate"} {
			if n := r.reports[i].Load(); n > 0 {
				if rv.Reports == nil {
					rv.Reports = map[string]uint64{}
				}
				rv.Reports[side] = n
			}
		}
		for k := range numKinds {
			if n := r.disagreed[k].Load(); n > 0 {
				if rv.Disagreements == nil {
					rv.Disagreements = map[string]uint64{}
				}
				rv.Disagreements[kindNames[k]] = n
			}
		}
		if len(rv.Live)+len(rv.Candidate) > 0 {
			v.Rules = append(v.Rules, rv)
		}
	}
	for _, b := range st.top.snapshot() {
		v.TopBuckets = append(v.TopBuckets, BucketView{Domain: b.row.domain, Rule: b.row.rule, Policy: b.kind.Rejecter(),
			Bucket: string(b.hash[:]), Kind: kindNames[b.kind], Disagreements: b.count, Overcount: b.over})
	}
	return v
}

// counts are the non-zero results of one side of a row.
func counts(c *[numResults]atomic.Uint64) map[string]uint64 {
	out := map[string]uint64{}
	for i := range c {
		if n := c[i].Load(); n > 0 {
			out[Result(i).String()] = n
		}
	}
	return out
}

// Handler serves View as JSON: the candidate is what cand returns now.
func (t *Tracker) Handler(cand func() *policy.Policy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(t.View(cand(), t.opts.Clock.Now()))
	})
}
