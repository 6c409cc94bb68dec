// Package memory is the default Store: bucket state in process memory,
// exact and fastest for one replica or one tokengate per Envoy.
//
// # Design
//
// Buckets live in a power-of-two number of shards, each a mutex and an
// open-addressing table (table.go) from the bucket's key hash (128 bits,
// seeded: see keyHash) to its state and version, inline; the shard is
// picked by masking the hash. A request locks only the shards its buckets
// live in, in ascending shard order, so requests on disjoint shards never
// wait for each other and multi-bucket requests can never deadlock.
//
// Memory is bounded. A bucket that is full carries no information (a fresh
// bucket starts full), so it is never stored and may be dropped at any
// time: one janitor for the whole store (Sweep, Run) drops full buckets and
// buckets of rules that left the policy, never a timer per bucket. MaxBuckets
// is a hard cap: a new bucket in a full shard evicts one of a few sampled
// buckets, preferring a full one (free) over the least recently refilled one
// (that hands its owner a fresh burst; it is counted as an idle eviction).
// A bucket in debt (a post-paid rule's, store.Report) is never full, so it
// is kept like any other that holds information, and an idle eviction
// forgives its debt with the rest.
//
// Reservations (a check's store.Item.Reserve) live in their bucket's
// shard, under its lock, and are bounded store-wide (reserve.go); a bucket
// that owes one back is never dropped as full.
//
// Request ids (idempotency) live in a separate table with its own shards,
// each a map plus a FIFO of bounded length; the id's lock is taken before
// any bucket lock, so the lock order stays fixed.
//
// Store is safe for concurrent use.
package memory
