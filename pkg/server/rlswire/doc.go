// Package rlswire decodes the RateLimitService's request and encodes its
// response by hand, with protowire, for pkg/server's gRPC codec: the two
// messages every ShouldRateLimit call carries, which proto's reflective
// decoder and encoder spent about a fifth of the server's CPU on at eight
// descriptors a request (plain builds, without vtprotobuf).
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
//     entries (with one slice of pointers each), one string as long as the
//     request that every string field is a part of (copied: gRPC reuses
//     the input buffer), and one array for each kind of optional
//     sub-message present.
//
//   - ResponseSize and MarshalResponse write a RateLimitResponse as
//     proto.Marshal writes it: fields in proto's order, so that the bytes
//     are proto's deterministic ones except for the order of map entries
//     (a Struct's fields are written in the map's order). Every field is
//     written by hand, dynamic_metadata's Struct included. Like
//     vtprotobuf's marshallers, it writes strings without checking their
//     UTF-8 and writes no unknown fields: tokengate builds its responses
//     and never adds either.
//
// Both are safe for concurrent use on distinct messages; MarshalResponse
// only reads its message, so responses may share parts (the rules'
// current_limit).
package rlswire
