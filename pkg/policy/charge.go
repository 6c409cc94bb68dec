package policy

// When a rule charges: before the request (its cost, if covered: the
// default) or after the response (post-paid: docs/policy.md, "Token
// budgets for LLM traffic").

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
)

// ParseCharge reads "before_request" or "after_response"; "" means
// before_request.
func ParseCharge(s string) (Charge, error) {
	switch s {
	case "", "before_request":
		return BeforeRequest, nil
	case "after_response":
		return AfterResponse, nil
	}
	return BeforeRequest, fmt.Errorf("%q: want before_request or after_response", s)
}

func (c Charge) String() string {
	if c == AfterResponse {
		return "after_response"
	}
	return "before_request"
}

// PostPaid reports whether the rule charges after the response.
func (r *Rule) PostPaid() bool { return r.Charge == AfterResponse }

// notPostPaid are the fields a post-paid rule may not have, and why.
var notPostPaid = []struct{ field, why string }{
	{"cost", "a check charges nothing, a report its own hits_addend"},
	{"max_cost", "a report is never refused; max_debt bounds what it may charge"},
	{"quota", "a quota rule is charged before the request"},
}

// charge reads a limited rule's charge and, for a post-paid rule, its
// max_debt (default: each band's capacity, one burst of debt), refusing the fields
// that mean nothing on one. It reports whether the rule is post-paid.
// paramsOK is whether rule.params are valid (limits).
func (r *reader) charge(rule *Rule, f map[string]*yaml.Node, a at, paramsOK bool) bool {
	if !enumField(r, f, a, "charge", ParseCharge, &rule.Charge) {
		return false
	}
	n := f["max_debt"]
	if !rule.PostPaid() {
		if n != nil {
			r.fail(n, a, "max_debt", errors.New("only with charge: after_response (a rule charged before the request never goes below zero)"))
		}
		return false
	}
	for _, np := range notPostPaid {
		if v := f[np.field]; v != nil {
			r.fail(v, a, np.field, fmt.Errorf("not allowed with charge: after_response: %s", np.why))
		}
	}
	var debt int64
	if n != nil {
		var err error
		if debt, err = integer(n); err != nil {
			r.fail(n, a, "max_debt", err)
			return true
		}
	}
	r.withMaxDebt(rule, n, debt, a, paramsOK)
	return true
}
