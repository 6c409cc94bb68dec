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
//   - capacity 1 .. MaxCapacity (10^15 tokens);
//   - rate N/P with 1 <= N <= MaxRateTokens (10^12) and
//     1ns <= P <= MaxRatePer (366 days);
//   - any elapsed time an int64 nanosecond clock can express (292 years).
//
// Parameters outside that range are refused by NewRate and NewParams with an
// error; they never wrap around. Durations that would not fit in an int64
// (the time to refill 10^15 tokens at 1/day) saturate at MaxDuration.
//
// # Invariants
//
//   - 0 <= Tokens <= capacity, and Frac == 0 whenever Tokens == capacity.
//   - The cursor At never moves back: a clock reading earlier than At is
//     treated as "no time passed" and can never mint tokens.
//   - A rejected decision consumes nothing (the refilled balance is kept);
//     an allowed one consumes exactly its cost.
//   - A cost above capacity is never affordable and changes no state.
package bucket
