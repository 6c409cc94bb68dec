package simulate

import (
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
)

// Result is what a trace decided under one policy.
type Result struct {
	Policy    string // the policy file's name
	Requests  int64  // requests decided
	OverLimit int64  // requests answered OVER_LIMIT
	NoRule    int64  // descriptors no rule matched (answered OK, nothing consumed)
	End       int64  // the instant of the last request, ns from the start
	// Rules are the rules that decided at least one descriptor, by domain
	// (sorted) and then in file order.
	Rules []*RuleResult
	// Buckets are the followed buckets (Options.Follow), in that order.
	Buckets []*Bucket
}

// RuleResult counts one rule's decisions. Every descriptor the rule
// matched is counted once, in exactly one of the five counts Allowed,
// Rejected, Refused, Blocked and Refunds; Checks and Reports say how many
// of them were checks and reports, and the token counts what they charged.
type RuleResult struct {
	Domain, Rule string
	Shadow       bool // rejections were counted, never answered
	// Charge is how the rule charges; Unlimited: it has no bucket (and
	// allows all).
	Charge    policy.Charge
	Unlimited bool
	// Allowed: the request was allowed and the rule's bucket charged (a
	// check, cost 0, charges nothing); an unlimited rule allows all. A
	// report (or a hit of an every_hit rule) that left its bucket at zero
	// or above, whatever the rest of its request.
	Allowed int64
	// Rejected: the bucket could not cover the cost (OVER_LIMIT; waiting
	// would have helped). A report (or a hit of an every_hit rule) that
	// left its bucket below zero: answered OVER_LIMIT, charged all the
	// same.
	Rejected int64
	// Refused: never passable: a cost above the rule's max_cost or its
	// capacity, or an over-long descriptor value.
	Refused int64
	// Blocked: the bucket could cover the cost, but another descriptor of
	// the same request was rejected or refused, so nothing was charged
	// (all or nothing). For a shadow rule, another shadow rule of the
	// request. Never a report or an every_hit rule's hit: those are
	// charged whatever the rest of the request says.
	Blocked int64
	// Refunds: refunds (negative hits) credited to the bucket.
	Refunds int64
	// Checks: decisions that asked for no tokens (a post-paid rule's
	// checks, a hits_addend of 0 elsewhere), in Allowed, Rejected or
	// Blocked. InDebt: of them, those rejected while their bucket was
	// below zero.
	Checks, InDebt int64
	// Reports: a post-paid rule's reports (its own hits_addend above 0),
	// in Allowed or Rejected.
	Reports int64
	// Charged is the tokens charged to the rule's buckets: every report's
	// (and every_hit hit's) cost less what was forgiven, and the costs of
	// the pre-paid descriptors allowed. A reservation is not counted: the
	// report that settles it charges the usage, and one never settled is
	// returned. A replayed answer (a repeated request id) charged nothing.
	// Forgiven is what of the reports was beyond max_debt, not charged:
	// on a rule of several limits, the most any of them forgave, as
	// tokengate_forgiven_tokens_total counts it (and Charged what each
	// was charged at least).
	Charged, Forgiven int64
	// Lowest is the lowest balance a decision left a bucket of the rule
	// with, in whole tokens, negative while in debt (on a rule of several
	// limits, the deciding one's: the one that refused, else the one with
	// the fewest tokens left); the first limit's capacity while no
	// decision took any (0 for an unlimited rule).
	Lowest int64
	// FirstDry is the first instant (ns from the start) a decision left
	// a bucket of the rule with fewer whole tokens than the rule's cost
	// (on a post-paid rule: than a check needs, one token or its
	// reserve), -1 if none ever did (and for unlimited rules).
	FirstDry int64
	// Series are the rule's decisions per second of the trace, for the
	// seconds in which it decided any.
	Series []Second

	order int // in the policy: domain, then file order
}

// Second is one second's decisions of a rule.
type Second struct {
	At       int64 // the second: [At, At+1) s from the start
	Allowed  int64 // Allowed
	Rejected int64 // Rejected and Refused
}

// Bucket is one bucket followed through a run.
type Bucket struct {
	Domain, Rule string
	// Label is the bucket as tokengate explain writes it:
	// edge/per-user["alice"], followed on a rule of several limits by
	// which, from 1: edge/per-user["alice"] limits[2].
	Label    string
	Capacity int64 // the rule's
	// MaxDebt is how far below zero the rule lets the bucket go: its
	// max_debt when it is charged after the response or every hit, else
	// 0.
	MaxDebt   int64
	Decisions int64
	// Tokens are the lowest balance the bucket held after a decision, in
	// whole tokens (negative: in debt), per second in which it decided
	// any.
	Tokens []Point

	key string // the store's key
}

// Point is a value in one second of the trace.
type Point struct {
	At    int64 // the second: [At, At+1) s from the start
	Value int64
}

// outcome is one descriptor's decision, counted in one RuleResult count.
type outcome uint8

const (
	outcomeAllowed outcome = iota
	outcomeRejected
	outcomeRefused
	outcomeBlocked
	outcomeRefund
)

// add counts one decision at instant at (ns).
func (rr *RuleResult) add(at int64, o outcome) {
	sec := at / 1e9
	if n := len(rr.Series); n == 0 || rr.Series[n-1].At != sec {
		rr.Series = append(rr.Series, Second{At: sec})
	}
	s := &rr.Series[len(rr.Series)-1]
	switch o {
	case outcomeAllowed:
		rr.Allowed++
		s.Allowed++
	case outcomeRejected:
		rr.Rejected++
		s.Rejected++
	case outcomeRefused:
		rr.Refused++
		s.Rejected++
	case outcomeBlocked:
		rr.Blocked++
	case outcomeRefund:
		rr.Refunds++
	}
}

// tally counts what one decided descriptor of the rule asked and
// charged: it is the item of its deciding band, o its outcome, v its
// verdict (v.Cost is the descriptor's cost, the item's unless the service
// asked for nothing because another descriptor was refused; v.Forgiven
// the most any band forgave); a replayed answer (replayed) charged
// nothing.
func (rr *RuleResult) tally(it *decided, o outcome, v *service.Verdict, replayed bool) {
	asked := v.Cost
	switch {
	case asked == 0:
		rr.Checks++
		if o == outcomeRejected && it.result.Debt > 0 {
			rr.InDebt++
		}
	case it.charge == store.Report && asked > 0 && rr.Charge == policy.AfterResponse:
		rr.Reports++
	}
	if replayed {
		return
	}
	switch {
	case it.charge == store.Report && it.cost > 0:
		rr.Charged += it.cost - v.Forgiven
	case it.charge == store.Prepaid && o == outcomeAllowed && it.cost > 0:
		rr.Charged += it.cost
	}
	rr.Forgiven += v.Forgiven
	rr.Lowest = min(rr.Lowest, balance(&it.result))
}

// balance is the whole tokens a result leaves in its bucket, negative in
// debt.
func balance(r *store.Result) int64 { return r.Remaining - r.Debt }

func (rr *RuleResult) decisions() int64 {
	return rr.Allowed + rr.Rejected + rr.Refused + rr.Blocked + rr.Refunds
}

// addMin records v in the second of instant at, keeping the least value
// of the second.
func addMin(ps []Point, at, v int64) []Point {
	sec := at / 1e9
	if n := len(ps); n > 0 && ps[n-1].At == sec {
		ps[n-1].Value = min(ps[n-1].Value, v)
		return ps
	}
	return append(ps, Point{At: sec, Value: v})
}
