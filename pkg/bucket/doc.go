// Package bucket is the exact arithmetic of a burst-tolerant token bucket.
//
// It is pure: no I/O, no locks, no clock reads. Every function takes the
// current time as a monotonic nanosecond reading and returns a new State; the
// caller (a store) owns the state and the synchronisation around it.
//
// # Representation
//
// A refill rate is the reduced fraction N tokens per P nanoseconds. A balance
// is Tokens whole tokens plus Frac/P of the next one, so refilling for e
// nanoseconds adds exactly e*N/P tokens with no rounding at all: refilling in
// many small steps gives the same balance as refilling in one large step.
// Intermediate products use 128-bit integers (math/bits), so the arithmetic
// is exact over the whole validated range:
//
//   - capacity 1 .. MaxCapacity (10^15 tokens), a debt bound 0 .. MaxDebt
//     (10^15 tokens);
//   - rate N/P with 1 <= N <= MaxRateTokens (10^12) and
//     1ns <= P <= MaxRatePer (366 days);
//   - any elapsed time an int64 nanosecond clock can express (292 years).
//
// Parameters outside that range are refused by NewRate, NewParams and
// Params.WithMaxDebt with an error; they never wrap around. Durations that
// would not fit in an int64 (the time to refill 10^15 tokens at 1/day)
// saturate at MaxDuration.
//
// # Post-paid buckets
//
// Decide charges before the request (pre-paid). A post-paid rule asks
// Check at request time (at least one token there? nothing charged) and
// charges the usage afterwards with Report, which is never refused and may
// take the balance below zero, down to minus the params' debt bound
// (Params.MaxDebt, debt.go).
//
// # Invariants
//
//   - -p.MaxDebt() <= balance <= capacity: 0 <= Tokens <= capacity for a
//     bucket that never had a Report, and Frac == 0 whenever Tokens ==
//     capacity. Only Report goes below zero.
//   - The cursor At never moves back: a clock reading earlier than At is
//     treated as "no time passed" and can never mint tokens.
//   - A rejected decision consumes nothing (the refilled balance is kept);
//     an allowed one consumes exactly its cost; a Check consumes nothing;
//     a Report consumes exactly its cost less Forgiven.
//   - A cost above capacity is never affordable and changes no state.
package bucket
