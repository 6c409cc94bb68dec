package main

// The Compiler of serve's policies, the live and the candidate one.

import (
	"errors"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// errPostPaidRedis refuses a post-paid rule on the Redis store, whose Lua
// does not decide them yet (it refuses their items, pkg/store/redis).
var errPostPaidRedis = errors.New("charge: after_response: post-paid rules need --store memory for now (the Redis store does not decide them yet)")

// errBudgetRedis is what serve --store redis says of a calendar budget,
// which the Redis store does not decide yet (it refuses its items).
var errBudgetRedis = errors.New("limits: a calendar budget (budget, per) needs --store memory for now (the Redis store does not decide budgets yet)")

// newCompiler is a Compiler for the policies decided on s's store, whose
// calendar budgets find their periods through clk's anchor: with --store
// redis, a policy with a post-paid rule or a calendar budget is refused as
// an invalid one is, so that tokengate does not start with it and a
// reload to it keeps the last good policy.
func newCompiler(s settings, clk clock.Clock) *policy.Compiler {
	c := new(policy.Compiler)
	if m, ok := clk.(*clock.Monotonic); ok {
		c.Anchor = m.Anchor() // the wall clock read once, when serve started
	}
	if s.Store == "redis" {
		c.Unsupported = func(r *policy.Rule) error {
			if r.PostPaid() {
				return errPostPaidRedis
			}
			if r.HasBudget() {
				return errBudgetRedis
			}
			return nil
		}
	}
	return c
}
