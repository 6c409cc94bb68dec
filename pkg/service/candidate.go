package service

import (
	"context"
	"errors"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/candidate"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Candidate is a candidate policy decided in shadow beside the live one
// (serve --candidate-policy): every request is decided under it too, after
// the live answer is made, on buckets of its own, and the Tracker hears
// both decisions. It never changes an answer and never charges a live
// bucket: it has its own store. A request costs one more store decision
// (two when it matches a shadow rule of the candidate, decided apart as
// live shadow rules are).
type Candidate struct {
	// Policy returns the candidate now in shadow; nil: none (the request
	// is not decided again).
	Policy func() *policy.Policy
	// Store holds the candidate's buckets, apart from the live ones (its
	// own memory store, or a Redis store with its own key prefix).
	Store   store.Store
	Tracker *candidate.Tracker
}

// candidateScratch is the candidate's working memory for one request.
type candidateScratch struct {
	sc         scratch
	live, cand []candidate.Decision
}

// decideCandidate decides the request under the candidate, if there is
// one, and hands both decisions to the tracker; live is the request's live
// plan, decided already, under the live policy pol.
func (s *Service) decideCandidate(ctx context.Context, now int64, pol *policy.Policy, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32, live *scratch) {
	c := s.opts.Candidate
	cand := c.Policy()
	if cand == nil {
		return
	}
	cs, _ := s.cands.Get().(*candidateScratch)
	if cs == nil {
		cs = new(candidateScratch)
	}
	defer s.cands.Put(cs)
	sc := &cs.sc
	sc.plan(cand, domain, descriptors, hits)
	sc.decide(ctx, c.Store, nil, now)
	// A timed-out call's charge stands, as a shadow rule's does: the
	// candidate answers no one.
	var amb store.Ambiguous
	for _, err := range []error{sc.enforced.err, sc.shadow.err} {
		if errors.As(err, &amb) {
			amb.Resolve(true)
		}
	}
	cs.live, cs.cand = live.decisions(cs.live[:0]), sc.decisions(cs.cand[:0])
	c.Tracker.Observe(now, pol, cand, &candidate.Request{Domain: domain, Live: cs.live, Candidate: cs.cand})
}

// decisions appends each descriptor's decision (the request-id descriptor
// left out), with the result respond counts it under.
func (sc *scratch) decisions(out []candidate.Decision) []candidate.Decision {
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.isID {
			continue
		}
		d := candidate.Decision{Rule: ds.rule, Result: sc.result(ds)}
		if ds.item >= 0 {
			d.Key = sc.batch(ds.rule).req.Items[ds.item].Key
		}
		out = append(out, d)
	}
	return out
}

// result is the decision of ds as a result of tokengate_decisions_total.
func (sc *scratch) result(ds *desc) candidate.Result {
	var res candidate.Result
	switch {
	case ds.rule == nil:
		return candidate.NoRule
	case ds.rule.Unlimited:
		return candidate.OK
	case ds.refusal != "":
		res = candidate.Refused
	case sc.batch(ds.rule).err != nil:
		return candidate.StoreError
	default:
		r := sc.batch(ds.rule).results[ds.item]
		switch {
		case r.Never:
			res = candidate.Refused
		case r.Allowed:
			return candidate.OK
		default:
			res = candidate.OverLimit
		}
	}
	if ds.rule.Shadow {
		return candidate.ShadowOverLimit
	}
	return res
}
