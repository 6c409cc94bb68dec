// Package breaker is a circuit breaker for calls to a service that can
// fail or stall: closed, calls go through; after Options.Failures failures
// in a row over at least Options.Window it opens, and calls fail at once
// for a backoff (doubling up to Options.MaxBackoff, with jitter so that
// replicas do not probe in step); then one probe call goes through, whose
// success closes it.
//
// Every call it lets through (Allow) hands back a Ticket, and its Outcome
// goes back through Report, whatever it is: a failed probe reopens the
// circuit for twice the backoff, an unsent one hands its turn to the next
// call at once, and a probe not reported within Options.ProbeTimeout has
// failed, so that no lost report, and no stall, leaves the circuit open
// for ever. Calls in flight together that fail together (one stall) count
// as one failure.
//
// Time is readings of an injected clock.Clock, so tests step through
// fixed instants. The breaker knows nothing of what it guards: its changes
// go to an Observer (the Redis store logs them and sets its gauge).
//
// A Breaker is safe for concurrent use; its Observer is called with the
// breaker's lock held.
package breaker
