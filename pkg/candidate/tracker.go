package candidate

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

// Result is a descriptor's decision, an index of metrics.Results.
type Result uint8

// The results, in the order of metrics.Results.
const (
	OK Result = iota
	OverLimit
	Refused
	ShadowOverLimit
	StoreError
	NoRule
	numResults
)

func (r Result) String() string { return metrics.Results[r] }

// Kind is a disagreement's kind.
type Kind uint8

const (
	LiveAllowedCandidateRejected Kind = iota
	LiveRejectedCandidateAllowed
	numKinds
)

var kindNames = [numKinds]string{metrics.LiveAllowedCandidateRejected, metrics.LiveRejectedCandidateAllowed}

func (k Kind) String() string { return kindNames[k] }

// Rejecter is the policy that rejected the request: "live" or
// "candidate".
func (k Kind) Rejecter() string {
	if k == LiveRejectedCandidateAllowed {
		return "live"
	}
	return "candidate"
}

// Decision is one descriptor's decision under one policy.
type Decision struct {
	Rule   *policy.Rule // nil: no rule matched
	Result Result
	// Key is the descriptor's bucket key, "" when it has none; it may
	// alias the caller's memory, valid only during Observe.
	Key string
	// Report: the descriptor is a report of a post-paid rule (charge:
	// after_response, its own hits_addend above 0), usage already served.
	// Envoy sends it when the response is done and ignores the answer.
	Report bool
}

// Rejects reports whether the decision makes its request OVER_LIMIT.
func (d Decision) Rejects() bool { return d.Result == OverLimit || d.Result == Refused }

// Request is one request decided under both policies. Its slices are only
// read during Observe. The request-id descriptor is left out.
type Request struct {
	Domain          string
	Live, Candidate []Decision
}

// report says whether either policy reads the request as a report: then
// it is the call Envoy makes once the response is done, whose answer
// reaches no client under either policy.
func (r *Request) report() bool {
	for _, ds := range [2][]Decision{r.Live, r.Candidate} {
		for _, d := range ds {
			if d.Report {
				return true
			}
		}
	}
	return false
}

// Options configure a Tracker.
type Options struct {
	Metrics    *metrics.Candidate // [registered nowhere]
	Clock      clock.Clock        // the service's, for View's age of the record [monotonic]
	Logger     *slog.Logger       // [slog.Default()]
	LogEvery   time.Duration      // least time between two summaries [1m]
	TopBuckets int                // size of the top list [64]
	// KeyHash names the top list's buckets, as the live service's
	// Options.KeyHash names them in its logs [keyhash.Random()].
	KeyHash *keyhash.Key
}

// Tracker hears both decisions of every request (see the package comment).
type Tracker struct {
	opts  Options
	state atomic.Pointer[state]
	mu    sync.Mutex // serialises building a state or a table
}

// New returns a Tracker with no candidate.
func New(opts Options) *Tracker {
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewCandidate(prometheus.NewRegistry())
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogEvery <= 0 {
		opts.LogEvery = time.Minute
	}
	if opts.TopBuckets <= 0 {
		opts.TopBuckets = 64
	}
	if opts.KeyHash == nil {
		opts.KeyHash = keyhash.Random()
	}
	return &Tracker{opts: opts}
}

// state is the record of one candidate policy, from when it was first seen.
type state struct {
	cand  *policy.Policy
	since int64 // clock reading when it was first seen
	rows  map[string]*row
	order []*row // rows in the order they were made
	table atomic.Pointer[table]
	top   topList
	// requests compared, and disagreements by kind: in all, and since the
	// last summary line; reports, never compared.
	compared, window, reports atomic.Uint64
	disagreed, windowDisagree [numKinds]atomic.Uint64
	nextLog                   atomic.Int64 // when the next summary is due
}

// row is one rule (or a domain's "no rule") of either policy.
type row struct {
	domain, rule string
	live, cand   [numResults]atomic.Uint64
	reports      [2]atomic.Uint64        // of them, reports: live, candidate
	disagreed    [numKinds]atomic.Uint64 // requests this rule's bucket decided the disagreement of
	counters     [numResults]prometheus.Counter
}

// table maps the rules of one live policy and the candidate to their rows.
type table struct {
	live     *policy.Policy
	rules    map[*policy.Rule]*row
	noRule   map[*policy.Policy]map[string]*row // by policy, by domain
	disagree map[string]*[numKinds]prometheus.Counter
	unknown  *row // a domain the deciding policy does not know
}

// Observe records a request decided at now (the service's clock reading)
// under live and the candidate cand. A request either policy reads as a
// report (Decision.Report) is counted per rule but never compared: Envoy
// ignores the answer of the call that reports a response's usage, so no
// client sees either answer, whatever the two say. What a report changes,
// the balance, shows in the checks that follow it.
func (t *Tracker) Observe(now int64, live, cand *policy.Policy, req *Request) {
	st := t.stateFor(cand, now)
	tb := st.tableFor(t, live)
	liveRejects, liveOK := tb.count(live, req.Domain, req.Live, false)
	candRejects, candOK := tb.count(cand, req.Domain, req.Candidate, true)
	switch {
	case req.report():
		st.reports.Add(1)
	case liveOK && candOK:
		st.compared.Add(1)
		st.window.Add(1)
		switch {
		case candRejects && !liveRejects:
			t.disagree(st, tb, LiveAllowedCandidateRejected, cand, req.Domain, req.Candidate)
		case liveRejects && !candRejects:
			t.disagree(st, tb, LiveRejectedCandidateAllowed, live, req.Domain, req.Live)
		}
	}
	t.summarise(st, now)
}

// count counts the decisions of one policy p (the candidate's also on
// its metrics), and says whether they make the request OVER_LIMIT and
// whether its store answered them all.
func (tb *table) count(p *policy.Policy, domain string, ds []Decision, cand bool) (rejects, answered bool) {
	answered = true
	for _, d := range ds {
		r := tb.row(p, domain, d.Rule)
		if cand {
			r.cand[d.Result].Add(1)
			r.counters[d.Result].Inc()
		} else {
			r.live[d.Result].Add(1)
		}
		if d.Report {
			r.reports[b2i(cand)].Add(1)
		}
		rejects = rejects || d.Rejects()
		answered = answered && d.Result != StoreError
	}
	return rejects, answered
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// disagree counts a disagreement of kind, decided by the rejecting
// decisions ds of p: each one's rule and, when it has one, its bucket.
func (t *Tracker) disagree(st *state, tb *table, kind Kind, p *policy.Policy, domain string, ds []Decision) {
	st.disagreed[kind].Add(1)
	st.windowDisagree[kind].Add(1)
	tb.disagreement(domain)[kind].Inc()
	for _, d := range ds {
		if !d.Rejects() {
			continue
		}
		r := tb.row(p, domain, d.Rule)
		r.disagreed[kind].Add(1)
		if d.Key != "" { // a descriptor refused before the store has no bucket
			st.top.add(kind, r, d.Key, t.opts.TopBuckets)
		}
	}
}

// stateFor is the record of cand, a fresh one when cand is new.
func (t *Tracker) stateFor(cand *policy.Policy, now int64) *state {
	if st := t.state.Load(); st != nil && st.cand == cand {
		return st
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.state.Load(); st != nil && st.cand == cand {
		return st
	}
	st := &state{cand: cand, since: now, rows: map[string]*row{}, top: topList{hasher: t.opts.KeyHash.Hasher()}}
	st.nextLog.Store(st.since + int64(t.opts.LogEvery))
	t.state.Store(st)
	return st
}

// tableFor is st's table for the live policy, built when live changes.
func (st *state) tableFor(t *Tracker, live *policy.Policy) *table {
	if tb := st.table.Load(); tb != nil && tb.live == live {
		return tb
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tb := st.table.Load(); tb != nil && tb.live == live {
		return tb
	}
	tb := &table{live: live, rules: map[*policy.Rule]*row{}, noRule: map[*policy.Policy]map[string]*row{},
		disagree: map[string]*[numKinds]prometheus.Counter{}}
	m := t.opts.Metrics
	for _, p := range []*policy.Policy{live, st.cand} {
		isCand := p == st.cand
		tb.noRule[p] = map[string]*row{}
		for _, d := range p.Domains() {
			tb.noRule[p][d] = st.rowOf(m, d, "", isCand)
			if tb.disagree[d] == nil {
				tb.disagree[d] = disagreeCounters(m, d)
			}
			for _, r := range p.Rules(d) {
				tb.rules[r] = st.rowOf(m, d, r.Name, isCand)
			}
		}
	}
	tb.unknown = st.rowOf(m, "", "", true)
	tb.disagree[""] = disagreeCounters(m, "")
	st.table.Store(tb)
	return tb
}

func disagreeCounters(m *metrics.Candidate, domain string) *[numKinds]prometheus.Counter {
	var c [numKinds]prometheus.Counter
	for k := range c {
		c[k] = m.Disagreements.WithLabelValues(domain, kindNames[k])
	}
	return &c
}

// rowOf is the row of a rule by name, made on first use (under t.mu),
// with its candidate counters when the candidate has the rule: a series of
// tokengate_candidate_decisions_total exists only for the candidate's
// rules.
func (st *state) rowOf(m *metrics.Candidate, domain, rule string, cand bool) *row {
	key := domain + "\x00" + rule
	r := st.rows[key]
	if r == nil {
		r = &row{domain: domain, rule: rule}
		st.rows[key] = r
		st.order = append(st.order, r)
	}
	if cand && r.counters[0] == nil {
		for i := range r.counters {
			r.counters[i] = m.Decisions.WithLabelValues(domain, rule, metrics.Results[i])
		}
	}
	return r
}

// row is the row of a descriptor of domain that matched rule of p (nil:
// none).
func (tb *table) row(p *policy.Policy, domain string, rule *policy.Rule) *row {
	if rule != nil {
		return tb.rules[rule]
	}
	if r := tb.noRule[p][domain]; r != nil {
		return r
	}
	return tb.unknown
}

func (tb *table) disagreement(domain string) *[numKinds]prometheus.Counter {
	if c := tb.disagree[domain]; c != nil {
		return c
	}
	return tb.disagree[""]
}

// Skip counts a request not decided under the candidate: too many were
// being decided already (service.Candidate.MaxInFlight).
func (t *Tracker) Skip() { t.opts.Metrics.Skipped.Inc() }
