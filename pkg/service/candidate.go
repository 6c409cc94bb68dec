package service

import (
	"context"
	"sync"
	"sync/atomic"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/candidate"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Candidate is a candidate policy decided beside the live one
// (serve --candidate-policy): every request is decided under it too, after
// the live answer is made, on buckets of its own, and the Tracker hears
// both decisions. It never changes an answer and never charges a live
// bucket: it has its own store. A request costs one more store decision
// (two when it matches a shadow rule of the candidate, decided apart as
// live shadow rules are).
type Candidate struct {
	// Policy returns the candidate now loaded; nil: none (the request
	// is not decided again).
	Policy func() *policy.Policy
	// Store holds the candidate's buckets, apart from the live ones (its
	// own memory store, or a Redis store with its own key prefix).
	Store   store.Store
	Tracker *candidate.Tracker
	// Async decides the candidate on a goroutine of its own once the
	// request is planned, so that the answer does not wait for the
	// candidate's store: for a store a round trip away (Redis), where
	// waiting would double the answer's latency. At most MaxInFlight
	// requests are decided so at once; a request beyond that is not
	// decided under the candidate, only counted (Tracker.Skip).
	Async bool
	// MaxInFlight bounds Async's goroutines [1024].
	MaxInFlight int64
}

// candidateState is the Service's for its Candidate.
type candidateState struct {
	states   sync.Pool    // *candidateReqState
	inFlight atomic.Int64 // Async decisions
}

// candidateReqState is the candidate's working memory for one request.
type candidateReqState struct {
	rs         reqState
	live, cand []candidate.Decision
	liveKeys   []byte // the live decisions' keys, for Async
}

// decideCandidate decides the request under the candidate, if there is
// one, and hands both decisions to the tracker; live is the request's live
// plan, decided already, under the live policy pol.
func (s *Service) decideCandidate(ctx context.Context, now int64, pol *policy.Policy, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32, live *reqState) {
	c := s.opts.Candidate
	cand := c.Policy()
	if cand == nil {
		return
	}
	if c.Async && !s.candInFlight(c) {
		c.Tracker.Skip()
		return
	}
	cs, _ := s.cand.states.Get().(*candidateReqState)
	if cs == nil {
		cs = new(candidateReqState)
	}
	cs.rs.plan(cand, domain, descriptors, hits, now)
	cs.live = live.decisions(cs.live[:0])
	if !c.Async {
		cs.finish(ctx, c, now, pol, cand, domain)
		s.cand.states.Put(cs)
		return
	}
	cs.ownLiveKeys()
	ctx = context.WithoutCancel(ctx) // the answer is sent: its cancellation is no reason to stop
	go func() {
		defer s.cand.inFlight.Add(-1)
		cs.finish(ctx, c, now, pol, cand, domain)
		s.cand.states.Put(cs)
	}()
}

// candInFlight takes a place for one more Async decision, if there is one.
func (s *Service) candInFlight(c *Candidate) bool {
	limit := c.MaxInFlight
	if limit <= 0 {
		limit = 1024
	}
	if s.cand.inFlight.Add(1) > limit {
		s.cand.inFlight.Add(-1)
		return false
	}
	return true
}

// ownLiveKeys copies the live decisions' keys, which point into the live
// request state, into cs, for a decision that outlives the request.
func (cs *candidateReqState) ownLiveKeys() {
	cs.liveKeys = cs.liveKeys[:0]
	for _, d := range cs.live {
		cs.liveKeys = append(cs.liveKeys, d.Key...)
	}
	off := 0
	for i := range cs.live {
		if n := len(cs.live[i].Key); n > 0 {
			cs.live[i].Key = unsafe.String(&cs.liveKeys[off], n)
			off += n
		}
	}
}

// finish decides the planned candidate and tells the tracker.
func (cs *candidateReqState) finish(ctx context.Context, c *Candidate, now int64, pol, cand *policy.Policy, domain string) {
	rs := &cs.rs
	rs.decide(ctx, c.Store, nil, now)
	// A timed-out call's charge stands, as a shadow rule's does: the
	// candidate answers no one.
	resolve(rs.enforced.err, true)
	resolve(rs.shadow.err, true)
	cs.cand = rs.decisions(cs.cand[:0])
	c.Tracker.Observe(now, pol, cand, &candidate.Request{Domain: domain, Live: cs.live, Candidate: cs.cand})
}

// decisions appends each descriptor's decision (the request-id descriptor
// left out), with the result of its verdict: what tokengate_decisions_total
// counts it under, and whether it is a report. The live plan was judged already; the candidate's is
// judged here, without a rule table (its verdicts feed no response).
func (rs *reqState) decisions(out []candidate.Decision) []candidate.Decision {
	if len(rs.verdicts) != len(rs.descs) {
		rs.judge(nil)
	}
	for i := range rs.verdicts {
		v := &rs.verdicts[i]
		if v.Result == ResultRequestID {
			continue
		}
		ds := &rs.descs[i]
		// A post-paid rule's descriptor with a cost is a report (costOf).
		d := candidate.Decision{Rule: v.Rule, Result: candidateResults[v.Result],
			Report: v.Rule != nil && v.Rule.Charge == policy.AfterResponse && ds.cost != 0}
		if ds.item >= 0 {
			d.Key = rs.batch(ds.rule).req.Items[ds.item].Key
		}
		out = append(out, d)
	}
	return out
}

// candidateResults are the Tracker's names of the results.
var candidateResults = [numResults]candidate.Result{
	ResultNoRule:          candidate.NoRule,
	ResultReplaced:        candidate.NoRule, // metrics.Results
	ResultOK:              candidate.OK,
	ResultOverLimit:       candidate.OverLimit,
	ResultRefused:         candidate.Refused,
	ResultShadowOverLimit: candidate.ShadowOverLimit,
	ResultStoreError:      candidate.StoreError,
}
