package simulate

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
// matched is counted once, in exactly one of the five counts.
type RuleResult struct {
	Domain, Rule string
	Shadow       bool // rejections were counted, never answered
	// Allowed: the request was allowed and the rule's bucket charged (a
	// check, cost 0, charges nothing); an unlimited rule allows all.
	Allowed int64
	// Rejected: the bucket could not cover the cost (OVER_LIMIT; waiting
	// would have helped).
	Rejected int64
	// Refused: never passable: a cost above the rule's max_cost or its
	// capacity, or an over-long descriptor value.
	Refused int64
	// Blocked: the bucket could cover the cost, but another descriptor of
	// the same request was rejected or refused, so nothing was charged
	// (all or nothing). For a shadow rule, another shadow rule of the
	// request.
	Blocked int64
	// Refunds: refunds (negative hits) credited to the bucket.
	Refunds int64
	// FirstDry is the first instant (ns from the start) a decision left
	// a bucket of the rule with fewer whole tokens than the rule's cost,
	// -1 if none ever did (and for unlimited rules).
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
	// edge/per-user["alice"].
	Label     string
	Capacity  int64 // the rule's
	Decisions int64
	// Tokens are the fewest whole tokens the bucket held after a decision,
	// per second in which it decided any.
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
