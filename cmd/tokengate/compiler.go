package main

// The Compiler of serve's policies, the live and the candidate one.

import (
	"errors"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// errBudgetRedis is what serve --store redis says of a calendar budget,
// which the Redis store does not decide yet (it refuses its items).
var errBudgetRedis = errors.New("limits: a calendar budget (budget, per) needs --store memory for now (the Redis store does not decide budgets yet)")

// newCompiler is a Compiler for the policies decided on s's store: rules
// that name no on_store_error answer --on-store-error, the reference's
// files charge as --reference-charge says, and calendar budgets find their
// periods through clk's anchor. With --store redis, a policy with a
// calendar budget is refused as an invalid one is, so
// that tokengate does not start with it and a reload to it keeps the last
// good policy.
func newCompiler(s settings, clk clock.Clock) *policy.Compiler {
	mode, _ := s.storeErrorMode()                   // checked with the settings
	charge, _ := referenceCharge(s.ReferenceCharge) // checked with the settings
	c := &policy.Compiler{OnStoreError: &mode, ReferenceCharge: charge}
	if m, ok := clk.(*clock.Monotonic); ok {
		c.Anchor = m.Anchor() // the wall clock read once, when serve started
	}
	if s.Store == "redis" {
		c.Unsupported = func(r *policy.Rule) error {
			if r.HasBudget() {
				return errBudgetRedis
			}
			return nil
		}
	}
	return c
}
