package main

// The Compiler of serve's policies, the live and the candidate one.

import (
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// newCompiler is a Compiler for the policies decided on s's store: rules
// that name no on_store_error answer --on-store-error, the reference's
// files charge as --reference-charge says, and calendar budgets find their
// periods through clk's anchor.
func newCompiler(s settings, clk clock.Clock) *policy.Compiler {
	mode, _ := s.storeErrorMode()                   // checked with the settings
	charge, _ := referenceCharge(s.ReferenceCharge) // checked with the settings
	c := &policy.Compiler{OnStoreError: &mode, ReferenceCharge: charge}
	if m, ok := clk.(*clock.Monotonic); ok {
		c.Anchor = m.Anchor() // the wall clock read once, when serve started
	}
	return c
}
