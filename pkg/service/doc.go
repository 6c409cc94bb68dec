// Package service answers Envoy's
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from the
// policy now serving and a store.
//
// Per request (docs/ARCHITECTURE.md, section 2): the clock is read once;
// each descriptor is matched to a rule of the request's domain (no rule, or
// an unlimited one: OK, nothing consumed); its cost is the descriptor's
// hits_addend when set (0 checks only), else the request's hits_addend when
// non-zero, else the rule's cost, negated by is_negative_hits (a refund).
// All enforced descriptors are decided together: if one cannot be covered,
// the request is OVER_LIMIT and none is charged. Shadow rules are decided on
// their own, counted, and always answer OK.
//
// # Post-paid rules
//
// On a rule with charge: after_response (plan.go, costOf) a descriptor
// with its own hits_addend above 0 is a report of that much usage, and
// every other one (its own hits_addend 0, or none, whatever the request's)
// a check. A check is OK while the bucket holds a whole token and charges
// nothing; a report is always charged, at most down to the rule's
// -max_debt (the rest counted in tokengate_forgiven_tokens_total), first
// and whatever the request's other descriptors say, and is OK while the
// balance stays at zero or above (store.Store has the rule). Its verdict
// carries the debt, into the dynamic metadata too. On a rule with reserve
// a check with the request id holds that many tokens until the report with
// the same id settles them (reserve.go); one without an id holds nothing,
// counted in tokengate_unreserved_checks_total.
//
// On a rule with charge: every_hit (the reference's files, unless
// pre-paid) every descriptor is a report of its cost, hits_addend 0
// included (itemCharge): charged whatever the request's other descriptors
// say, OVER_LIMIT while the balance after it is below zero, as the
// reference's counter is while above its limit.
//
// # Verdicts
//
// Each descriptor gets one Verdict (verdict.go): its Result (the metric
// label), code, cost, remaining tokens, reset and retry times, the reason
// of a refusal, whether it was degraded, and its rule. Everything said
// about a decision is written from the verdicts: the response's statuses
// and headers (respond.go), the front doors' headers (DecideFunc), and
// the metrics (rulemetrics.go).
//
// # Why was a request limited
//
// A response that limited or degraded a descriptor carries Envoy
// dynamic_metadata (metadata.go: the domain, rule, hashed bucket key,
// cost, remaining, retry-after, reason); an OK response carries none and
// costs nothing more. Options.DecisionLog logs each refusal and degraded
// answer at info and every decision at debug, each level bounded per
// second (decisionlog.go); Options.Tracer makes each decision a span
// (trace.go). None of them holds a client's value: a bucket is named by
// the keyed hash of its key (Options.KeyHash, pkg/keyhash), which replicas
// sharing a secret write alike; spans name no bucket.
//
// # Bad requests
//
// What Envoy's configuration shapes gets a gRPC InvalidArgument, and Envoy
// applies its failure_mode_deny: an empty domain, no descriptors, more than
// MaxDescriptors descriptors, a descriptor with no entries or more than
// MaxEntries, an empty or over-long entry key. What a client shapes (an
// entry value, through a header or a path) never turns into an error that
// failure_mode could let through: a value longer than MaxValueBytes in a
// limited descriptor refuses that descriptor (OVER_LIMIT, no retry time, a
// reason). So does a cost above the rule's max_cost or capacity: no amount
// of waiting makes it affordable.
//
// # What a client is told
//
// The statuses, retry-after and the headers of Options.LimitHeaders. The
// reason of a refusal names rules and costs, and a degraded answer says
// the store is failing (with on_store_error: allow, that limits are off):
// both are in the dynamic metadata and the decision log, and in the
// x-tokengate-reason and x-tokengate-degraded headers only with
// Options.ClientReasonHeader.
//
// # Store failures
//
// When the store fails, each rule's on_store_error answers, the response
// is marked degraded (its metadata; x-tokengate-degraded when clients are
// told), and the descriptor is counted as result
// store_error and in tokengate_store_error_answers_total by the answer it
// got, never as an over_limit of its bucket. Failures are logged at most
// once per Options.StoreLogEvery, each line with the number held back
// since the one before; the store's first answer after an interval logs
// the rest.
//
// # Candidate policy
//
// With Options.Candidate, every request is decided again, once its answer
// is made, under a candidate policy on a store of its own (candidate.go):
// never changing the answer, never charging a live bucket; a
// candidate.Tracker compares the two.
//
// Service is safe for concurrent use; the hot path allocates only the
// response it returns (one allocation up to two descriptors, plus the
// metadata's map when a descriptor was limited or degraded).
package service
