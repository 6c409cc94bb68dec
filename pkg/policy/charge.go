package policy

// When a rule charges: before the request (its cost, if covered: the
// default), after the response (post-paid: docs/policy.md, "Token budgets
// for LLM traffic"), or every hit, covered or not (envoyproxy/ratelimit's
// counting: docs/policy.md, "Charging every hit").

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Charge is when a rule charges a request.
type Charge uint8

const (
	// BeforeRequest charges a descriptor's cost when it is decided, if
	// the bucket covers it (pre-paid).
	BeforeRequest Charge = iota
	// AfterResponse is post-paid: a descriptor with its own hits_addend
	// above 0 reports usage already served and is always charged, at most
	// down to -max_debt; any other descriptor checks that at least one
	// token is left and charges nothing.
	AfterResponse
	// EveryHit charges every descriptor its cost (hits_addend, else the
	// request's, else the rule's cost), covered or not, at most down to
	// -max_debt, and answers OVER_LIMIT while the balance is below zero
	// after it: envoyproxy/ratelimit's fixed-window counter, which counts
	// every hit and refuses while the count is above the limit. A cost of
	// 0 charges nothing and is OVER_LIMIT while the balance is below zero.
	// Each descriptor is charged whatever the others of its request say.
	EveryHit
)

// ParseCharge reads "before_request", "after_response" or "every_hit"; ""
// means before_request.
func ParseCharge(s string) (Charge, error) {
	switch s {
	case "", "before_request":
		return BeforeRequest, nil
	case "after_response":
		return AfterResponse, nil
	case "every_hit":
		return EveryHit, nil
	}
	return BeforeRequest, fmt.Errorf("%q: want before_request, after_response or every_hit", s)
}

func (c Charge) String() string {
	switch c {
	case AfterResponse:
		return "after_response"
	case EveryHit:
		return "every_hit"
	}
	return "before_request"
}

// PostPaid reports whether the rule may charge its bucket below zero,
// down to its max_debt: charged after the response, or every hit. The
// store decides such a rule's descriptors as reports (and checks).
func (r *Rule) PostPaid() bool { return r.Charge != BeforeRequest }

// notPostPaid are the fields a rule charged below zero may not have, and
// why; all only with charge: after_response.
var notPostPaid = []struct {
	field, why string
	all        bool
}{
	{"cost", "a check charges nothing, a report its own hits_addend", false},
	{"max_cost", "no cost is refused; max_debt bounds what is charged", true},
	{"quota", "a quota rule is charged before the request", false},
}

// charge reads a limited rule's charge and, for a rule charged below zero,
// its max_debt (default: each band's capacity, one burst of debt),
// refusing the fields that mean nothing on one. It reports whether the
// rule reads a cost (before_request, every_hit). paramsOK is whether the
// rule's bands' params are valid (limits).
func (r *reader) charge(rule *Rule, f map[string]*yaml.Node, a at, paramsOK bool) bool {
	if !enumField(r, f, a, "charge", ParseCharge, &rule.Charge) {
		return true
	}
	n := f["max_debt"]
	if !rule.PostPaid() {
		if n != nil {
			r.fail(n, a, "max_debt", errors.New("only with charge: after_response or every_hit (a rule charged before the request never goes below zero)"))
		}
		return true
	}
	for _, np := range notPostPaid {
		if v := f[np.field]; v != nil && (np.all || rule.Charge == AfterResponse) {
			r.fail(v, a, np.field, fmt.Errorf("not allowed with charge: %s: %s", rule.Charge, np.why))
		}
	}
	r.maxDebt(rule, n, a, paramsOK)
	return rule.Charge == EveryHit
}

// maxDebt bounds the debt of every band of a rule charged below zero by
// n's max_debt, or when the rule gives none (n nil) by the band's own
// capacity, failing at n when a bound is out of range. It changes the
// bands only when paramsOK.
func (r *reader) maxDebt(rule *Rule, n *yaml.Node, a at, paramsOK bool) {
	var debt int64
	if n != nil {
		var err error
		if debt, err = integer(n); err != nil {
			r.fail(n, a, "max_debt", err)
			return
		}
	}
	for i := range rule.Bands {
		b := &rule.Bands[i]
		d := debt
		if n == nil {
			d = b.params.Capacity()
		}
		p, err := b.params.WithMaxDebt(d)
		if err != nil {
			r.fail(n, a, "max_debt", err)
			return
		}
		if paramsOK {
			b.params = p
		}
	}
}
