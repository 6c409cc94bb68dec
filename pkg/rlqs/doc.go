// Package rlqs serves Envoy's rate_limit_quota filter
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService, RLQS) on
// tokengate's own buckets: Envoy decides requests locally from the token
// buckets assigned to it and reports its usage; tokengate pays what it
// assigns from the same buckets ShouldRateLimit decides on, so both
// protocols spend one budget, on one replica or many (the Redis store).
//
// # Matching
//
// A stream's first message names its policy domain. A BucketId, an
// unordered map, is matched to a rule as a descriptor is: put into each
// key order the domain's rules use for its set of keys, matched by the
// policy's match index, the earliest rule in file order winning; its
// bucket is the one Rule.AppendKey names (match.go). A bucket of no rule,
// or of an unlimited or not_limited rule, gets blanket_rule ALLOW_ALL; a
// rule of capacity 0, DENY_ALL; a shadow rule ALLOW_ALL, its reports
// charged as usage.
//
// # Leases
//
// Each report is answered, for each of its buckets, with a token bucket:
// max_tokens m = k, tokens_per_fill k, fill_interval F (whole seconds, the
// shortest in which the rule gives a token; Envoy reads only seconds), and
// assignment_time_to_live T, TTLIntervals reporting intervals rounded up to
// whole seconds. Envoy's token bucket starts full when it arrives and
// refills continuously, so under one assignment it can spend at most
// m + k*(x-start)/F by any instant x; and it keeps running while the same
// assignment is sent again. So an assignment is a lease (lease.go): it is
// paid from the bucket, by a pre-paid store decision, before Envoy can
// spend it: m and the refill up to T plus DeliverySlack S ahead when it is
// new, and at each refresh the refill of the time that passed. A
// replaced lease's refill paid beyond now + S pays for the next one.
// When the bucket cannot pay for the share, the stream keeps the lease it
// has if that can be paid, or gets a smaller one the balance pays, or
// DENY_ALL.
//
// A rule of several limits (policy.Band) is leased from all of them: each
// store decision has one item per band, of one cost, all or nothing; F and
// the fill are the slowest refilling band's (a rule of calendar budgets
// alone: the budget's pace over its longest period, fillOfRule), and a
// lease on a rule with a budget lives at most until its period's end
// (leaseTTL), so that each period's bucket pays only for what Envoy spends
// within it. A lease is pre-paid on every charge mode: on a post-paid
// rule it never takes a band into debt, and a band in debt leases
// nothing.
//
// Shares: K, the rule's whole tokens per F, is divided among the streams
// of the replica subscribed to the bucket by their demand (allowed plus
// denied per reporting interval), each keeping a floor of K/(4n) (at least
// 1) so that a quiet Envoy can start; a stream that subscribes gets its
// floor at once, the others being sent their smaller shares first. A
// share moves only by more than 1/8, because every new token bucket is a
// new burst to pay. Across replicas the shares of each replica sum to at
// most K and the store decides which leases the bucket pays.
//
// # Reports
//
// A report's num_requests_allowed is counted against what the
// subscription has paid; what exceeds it (requests Envoy allowed with no
// assignment, or after one expired, under its own behaviours) is charged
// as post-paid usage, store.Report: never refused, down to the rule's
// -max_debt. On a pre-paid rule (max_debt 0) the same report takes the
// balance down to zero and the rest is forgiven, counted in
// tokengate_rlqs_forgiven_tokens_total: such requests were served
// already, so they are counted rather than refused. num_requests_denied is
// demand: counted, and charged (as reports) only on a rule charged every
// hit, as ShouldRateLimit charges a refused hit of one.
//
// # The bound
//
// With every assignment delivered within S, what the Envoys allow for a
// bucket from 0 to t under assignments was paid for before (TestBoundSimulated
// checks it at every instant), so with the filter's no_assignment_behavior
// and expired_assignment_behavior denying, all Envoys together allow at
// most
//
//	capacity + rate*t (+ max_debt of a post-paid rule)
//
// of every band that refills, and at most a budget band's budget (+ its
// max_debt) within each of its periods, with no overshoot, whatever the reporting intervals and the shares. A
// response that takes d > S to arrive lets its stream overshoot by at most
// k*(d-S)/F; requests a behaviour of Envoy's own allows are charged when
// reported. The price is held back, not overshoot: at any instant up to
//
//	sum over streams s of k_s*(1 + (T+S)/F) tokens, T = ceil(TTLIntervals*I)
//
// are paid and not yet spent (I the reporting interval), and a replaced
// token bucket's burst m is paid again; the floors of streams without
// demand, at most a quarter of the rate together, are paid unspent. A rule whose capacity is below
// that float for its rate gets smaller shares than its rate.
//
// # Operating
//
// Limits: MaxStreams a replica, MaxBucketsPerStream a stream (and so a
// message); a message over the gRPC port's --grpc-max-recv-bytes is
// refused by gRPC. A refused stream or message ends the stream with
// ResourceExhausted or InvalidArgument naming the limit. Tick (Run calls
// it) takes a new policy to every stream at once, drops from the shares
// the subscriptions silent past T + S, and abandons (AbandonAction) the
// buckets without a request for AbandonAfter. Metrics are registered on
// Options.Registerer (metrics.go). With Options.DecisionLog every action
// sent is a line (decisionlog.go): a token bucket at debug, a DENY_ALL,
// an answer to a failed store and an abandon at info, each level bounded
// per second as ShouldRateLimit's decision log is, buckets named by their
// keyed hash (Options.KeyHash), never by their values.
//
// # Concurrency
//
// A Service is safe for concurrent use; its locks and their order are in
// Service's comment. Store calls are made under one bucket's lock only,
// so different buckets are decided in parallel: those of different
// streams, and with Options.Concurrency those of one message, which lets
// the Redis store batch them. Run ends every stream when its context
// ends.
package rlqs
