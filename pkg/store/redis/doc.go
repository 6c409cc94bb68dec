// Package redis is the store for several tokengate replicas sharing one
// quota: bucket state lives in Redis (single node, Sentinel or Cluster;
// Valkey works too) and is exactly as exact as the memory store.
//
// # Opening
//
// Open (open.go) dials Redis and returns a store that serves errors
// wrapping store.ErrUnavailable until it has connected, connecting in the
// background while Redis is down, and a candidate policy's store on the
// same client; New is a Store on a client the caller dialled. Connecting,
// the check of Redis's memory settings and the watch of its reachability
// are package redisconn's, which knows a client and nothing of the store;
// Decide's two guards, a bound on the work in flight and the circuit
// breaker, are internal/admission and internal/breaker (guards.go).
//
// # One call per request
//
// A request's whole decision (every bucket: version transition, refill,
// the all-or-nothing check, the charge, the TTL, the request id) is one
// call of one Lua program (lua/*.lua, embedded and concatenated after a
// prelude generated from contract.go, which defines every argument and
// reply position and record format the two sides share). It is loaded as
// a Redis function library and called by FCALL: its definitions run once
// and each call runs only its entry, which is most of a script's cost
// saved (calls.go); on a server without functions it is called by EVALSHA,
// with EVAL after a NOSCRIPT. Inside, a call reads all its buckets with one
// MGET and writes each only when the bucket changed by more than a refill
// (a rejection or a check writes nothing): the usual decision (lua/lean.lua)
// a SETRANGE of the balance, which keeps the TTL, a new or converted bucket
// one SET that carries its TTL. Concurrent requests of one replica share a
// call (batch.go), each decided on its own as if alone, with one MGET for
// the whole batch; a decide without a request id goes as one packed
// argument (compact.go), its versions once per batch.
//
// # Exact arithmetic in Lua
//
// Lua numbers in Redis are doubles, exact only below 2^53, while
// pkg/bucket needs 128-bit intermediate products (tokens times a period of
// up to 366 days in ns) and, for a scale transition, four such factors.
// The script has two paths. The usual bucket, whose capacity times its
// period is below 2^52 and whose cursor is within 2^52 ns of now, is
// decided in plain numbers (lua/fast.lua explains why every step is then
// exact); the store sends its parameters packed only when they fit. Every
// other bucket, and every version transition, is decided on
// arbitrary-size integers: arrays of base-10^7 limbs (lua/bignum.lua), on
// which every step stays below 2^53 (a limb product is below 10^14;
// division is Knuth's algorithm D with two-limb quotient estimates). So
// the whole validated range of pkg/bucket is supported and no parameter
// needs to be refused; lua/bucket.lua and lua/fast.lua mirror pkg/bucket
// function by function, and a rapid test compares both paths, and the
// bounds between them, with pkg/bucket on thousands of random sequences.
//
// # Post-paid items
//
// Checks and reports (store.Charge) are decided in the same call, on
// both paths, exactly as pkg/bucket decides them: the script charges a
// request's reports first, on each bucket as loaded, and decides its
// other items all or nothing on what they left; what a report leaves is
// written whatever the rest says. An item's charge travels with its
// version's arguments (contract.go: itemMode), and a version's debt bound
// is part of its parameters (in its identity, debtSep). A balance below
// zero is stored as it is, a signed double, floored as bucket.State keeps
// it; the plain-number path decides it as such (lua/fast.lua bounds
// (capacity+max debt)*period), the bignum path on the balance shifted by
// the debt bound, so that its numbers stay non-negative (lua/bucket.lua).
// A bucket in debt is not full, so its key lives until it is, its debt
// repaid, and the usual slack.
//
// # Reservations
//
// A check that reserves (store.Item.Reserve; itemMode chargeReserve, its
// tokens as its cost) takes them in the request's call and records them
// in its bucket's holds hash (contract.go, holdsSuffix: the bucket's key
// and so its slot), a field per request id (argHold, a hash of the id)
// holding the tokens and the expiry on the script's clock, the buckets'
// own. The report with the id settles it in its call (lua/holds.lua). The
// bucket's record carries a mark after its identity (holdSep: an instant
// at or before the earliest expiry), so that a decision reads the hash
// only once one may be due, and returns every expired one, as refunds,
// before anything else of that decision; a marked bucket is decided on
// the general path, is not deleted while full, and gives the deny cache
// no snapshot (a reservation may come back before anything refills it).
// The hash lives as long as the record and its longest reservation, with
// the tolerance. Records of buckets without reservations are as before.
// Across Cluster slots a reserve records the reservation and a rollback
// removes it (cross.go).
//
// # Time
//
// No wall clock decides. Each replica maps its own monotonic clock (the
// one its requests are read on, Options.Clock) onto a shared epoch fixed
// once, from a live replica's published time or, for the first one, the
// Redis host's TIME (clock.go, which states the rule and the skew it
// allows); the script reads no clock. A bucket's cursor never moves back:
// a request whose instant is before it (a replica behind another) is "no
// time passed", as in pkg/bucket. Options.RequestTime decides at
// Request.Now itself, for tests that drive time (the conformance suite).
//
// # Keys and expiry
//
// A bucket is one string, prefix{tag}, where tag is 128 bits of SHA-256
// of the bucket key (collision resistant, since keys hold client values).
// It holds packed doubles (the balance: tokens, fraction, cursor; its
// version's activation; the instant its key surely lives to) and the
// identity of the version it was decided under (contract.go). Its TTL
// covers the time until it is full again and twice ClockStepTolerance
// (6h), and is kept (SETRANGE or SET KEEPTTL, cheaper writes) while it still covers
// one tolerance past the full instant; a full bucket is deleted. Expiry
// runs on the Redis host's wall clock, decisions on the shared clock: a
// forward step of that wall clock up to the tolerance expires no bucket
// early (which would hand out a fresh one), a step back only keeps keys
// longer. A key that outlives its bucket's full instant is harmless: a
// full bucket carries no information, except its cursor: the memory
// store must remember the latest forgotten cursor because a request may
// read the clock before another that goes first. Here a request decided
// after a key vanished, at an instant behind its cursor (a replica behind
// another by d), may refill that stretch again once: at most d*rate
// tokens, the skew bound of clock.go. (With RequestTime keys have no TTL
// and the store keeps the forgotten cursor in the process, exactly like
// the memory store.) A key written by an earlier tokengate in another
// format reads as no bucket (MGET answers nil for a hash) and is replaced.
//
// A TTL is worked out under the parameters the bucket was decided under.
// When a reload then raises a rule's capacity with on_resize clamp, a key
// that expires because it was full under the old capacity comes back full
// under the new one, where the memory store would have clamped it to the
// old capacity and refilled from there: the one way in which expiry is not
// exactly "no information lost".
//
// # Versions across replicas
//
// bucket.Version IDs are numbered per process, so they do not order
// versions across replicas. A bucket stores (revision, process id, version
// id, activation, parameters), and a request's version replaces the
// stored one only when it was applied later:
//
//   - this process's own versions are ordered by ID (the order in which
//     it applied them), and the chain of earlier versions
//     (bucket.Version.Prev) is walked as Bring does;
//   - another process's version at the same revision with equal
//     parameters needs no conversion;
//   - otherwise another process's version is newer when it was activated
//     later, on the shared clock.
//
// The revision does not order versions: a rollback (a lower revision
// applied after a higher one) applies, as in the memory store. A replica
// still on a policy applied earlier decides a bucket under the parameters
// stored with it, so during a rolling update a bucket never moves back to
// parameters it has left. What activation cannot tell from a rollback is
// a replica started with an older policy than the others serve: it applies
// its policy at start. The activation of a version is mapped onto the
// shared clock as "now minus its age" (the age measured on the replica's
// own clock).
//
// # Cluster
//
// Keys carry hash tags, so one bucket is one slot. A request whose buckets
// share a slot (every request outside Cluster, every single-bucket request)
// is one call. One whose buckets span nodes is a reserve on every node at
// once and, only when needed, a settle (see cross.go): it is never
// oversold, but a concurrent request may be rejected by a reservation that
// is then rolled back. Calls are batched per master node (nodes.go), and a
// batch of several slots is one call routed by one of its keys, which
// fails whole, writing nothing, when the nodes' map it was grouped by is
// stale. So a request whose buckets span slots of one node is one call,
// all or nothing as on one Redis; reserve and settle are for requests of
// several nodes.
//
// # Request ids
//
// A request id's answer is kept in a hash next to the request's first
// bucket for Options.ReplayWindow, with a fingerprint of its buckets and
// costs and store.MaxReplays replays left.
//
// # Failure
//
// Over-limit answers are often given without Redis, from snapshots of
// buckets Redis has just rejected (deny.go says what that can get wrong,
// and the bound). Every Decide that goes to Redis is admitted by a
// per-replica budget of buckets in flight, in which heavy requests get
// only a share (internal/admission), and has a deadline (Options.Timeout,
// 15ms by default, under Envoy's 20ms rate_limit timeout). Repeated
// failures open a circuit breaker: calls fail at once with
// store.ErrUnavailable for a backoff (100ms doubling to 5s, with jitter),
// then one probe call tries Redis again; success closes it, and every
// other way a probe ends reports back too (internal/breaker; guards.go
// judges each call), so that no stall leaves the circuit open for ever.
// Health names an open circuit. What an answer is while Redis fails is
// each rule's on_store_error (pkg/service). A call still out at its
// request's deadline may yet charge: ambiguous.go refunds the charge of a
// request that on_store_error refused.
//
// Store and Lazy are safe for concurrent use.
package redis
