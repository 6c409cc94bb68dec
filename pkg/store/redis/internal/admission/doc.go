// Package admission bounds the work in flight, weighted by items, so that
// heavy requests cannot starve light ones.
//
// The Redis store is its user: Redis runs one script at a time, and a
// decision's script costs Redis CPU in proportion to its buckets (a few µs
// each). Unbounded, one client's flood of 64-bucket requests queues so
// much work ahead of everyone else's one-bucket requests that they pass
// the store's timeout, though Redis is up. So every call is admitted
// before it is made, its weight being its item count:
//
//   - all admitted requests together hold at most Budget items;
//   - heavy ones (more than Light items) together hold at most
//     HeavyShare of Budget, so the rest is always there for light ones:
//     they wait only behind other light work, never behind a heavy flood;
//   - a request that does not fit waits, in FIFO order within its class,
//     until it fits, its context ends or it has waited Wait (half the
//     callers' timeout). One not admitted gets the context's error; the
//     caller sheds it. Wait leaves an admitted call the rest of the
//     timeout: one admitted just before its deadline would time out in
//     Redis and count as Redis failing.
//
// A light request fits when the total has room, a heavy one when the total
// and the heavy share both have room; when room frees, light waiters are
// let in first. A heavy request of more items than the heavy share (only
// with a small Budget) weighs the whole share, so it runs alone among
// heavy ones instead of never.
//
// The bound is per Gate (per replica): with many replicas on one Redis,
// Budget times replicas times the per-bucket cost (3-6 µs) should stay
// well under the timeout. The package knows item counts and deadlines
// only; the items in flight go to two gauges its caller passes in.
//
// A Gate is safe for concurrent use; a nil *Gate (admission off) admits
// everything at once.
package admission
