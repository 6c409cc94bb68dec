// Package lenient decodes protobuf wire data as proto.Unmarshal does but
// for one thing: a string field keeps its bytes as they came, valid UTF-8
// or not (a Go string may hold any bytes, and protoreflect.ValueOfString
// does not check). pkg/server's gRPC codec uses it for the requests that
// proto.Unmarshal refuses, because Envoy forwards header bytes as they
// came.
//
// The wire format is read field by field with protowire and stored through
// protoreflect, so that it serves any message (RateLimitRequest and
// CheckRequest alike). Everything else follows google.golang.org/protobuf's
// decoder (internal/impl/decode.go, codec_map.go): a wire type that does not
// fit its field makes the field unknown; packed and unpacked repeated
// scalars are both accepted; messages that repeat are merged; oneof members
// replace each other; map entries default a missing key or value; unknown
// fields are kept in order; the recursion limit is the same; required fields
// are checked. Groups (proto2 only; no Envoy API uses them) are refused.
//
// It is the slow path: the codec calls Unmarshal only after proto.Unmarshal
// has failed. Unmarshal is safe for concurrent use on distinct messages.
package lenient
