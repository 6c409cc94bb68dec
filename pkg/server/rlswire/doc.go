// Package rlswire decodes the RateLimitService's request by hand, with
// protowire, for pkg/server's gRPC codec: the message every
// ShouldRateLimit call carries, which proto's reflective decoder spent
// about a tenth of the server's CPU on at eight descriptors a request.
//
// The contract is proto's, or nothing:
//
//   - DecodeRequest fills a RateLimitRequest exactly as proto.Unmarshal
//     would (proto.Equal), or says it will not and leaves the message
//     untouched, for the caller to decode it as before. It reads the fields
//     RateLimitRequest and its nested messages declare, in any order and as
//     often as they come (the last of a scalar wins, a message that repeats
//     is merged, as proto does); anything else (an unknown field, a wire
//     type the field does not have, a string that is not UTF-8, data that
//     is cut short or malformed) is not its business: it answers false
//     without deciding whether proto would accept it. What it decodes
//     allocates a fixed number of times whatever the number of
//     descriptors: one backing array for the descriptors and one for their
//     entries (with one slice of pointers each), one string that every
//     string field is a part of (copied: gRPC reuses the input buffer), and
//     one array for each kind of optional sub-message present.
//
// It is safe for concurrent use on distinct messages.
package rlswire
