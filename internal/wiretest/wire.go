// Package wiretest builds protobuf wire data by hand and sends it over a
// real gRPC connection, for tests of requests that proto.Marshal refuses
// to write (strings that are not UTF-8, as Envoy forwards header bytes).
// Field numbers are those of the .proto files named beside each builder.
// FullRateLimitRequest and FullCheckRequest are requests with every field
// set, built with the generated types.
package wiretest

import "google.golang.org/protobuf/encoding/protowire"

// Wire is protobuf wire data, built field by field.
type Wire []byte

// Str appends a string (or bytes) field.
func (w Wire) Str(num protowire.Number, s string) Wire {
	return protowire.AppendString(protowire.AppendTag(w, num, protowire.BytesType), s)
}

// Msg appends a message field.
func (w Wire) Msg(num protowire.Number, sub Wire) Wire {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), sub)
}

// Varint appends a varint field.
func (w Wire) Varint(num protowire.Number, v uint64) Wire {
	return protowire.AppendVarint(protowire.AppendTag(w, num, protowire.VarintType), v)
}

// Entry is a map entry, or any message of key = 1 and value = 2 strings
// (RateLimitDescriptor.Entry).
func Entry(key, value string) Wire { return Wire{}.Str(1, key).Str(2, value) }

// Descriptor is an envoy.extensions.common.ratelimit.v3
// RateLimitDescriptor of key, value pairs (entries = 1).
func Descriptor(kv ...string) Wire {
	var w Wire
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.Msg(1, Entry(kv[i], kv[i+1]))
	}
	return w
}

// RateLimitRequest is an envoy.service.ratelimit.v3 RateLimitRequest
// (domain = 1, descriptors = 2, hits_addend = 3).
func RateLimitRequest(domain string, hits uint32, descriptors ...Wire) Wire {
	w := Wire{}.Str(1, domain)
	for _, d := range descriptors {
		w = w.Msg(2, d)
	}
	if hits != 0 {
		w = w.Varint(3, uint64(hits))
	}
	return w
}

// CheckRequest is an envoy.service.auth.v3 CheckRequest (attributes = 1)
// from source, of a GET of path with the headers (header name, value
// pairs) and the context extension domain when not empty:
// AttributeContext (source = 1, request = 4, context_extensions = 10),
// Peer (address = 1), Address (socket_address = 1), SocketAddress
// (address = 2, port_value = 3), Request (http = 2), HttpRequest (id = 1,
// method = 2, headers = 3, path = 4, host = 5).
func CheckRequest(source, domain, path string, headers ...string) Wire {
	socket := Wire{}.Str(2, source).Varint(3, 51000)
	http := Wire{}.Str(1, "1").Str(2, "GET")
	for i := 0; i+1 < len(headers); i += 2 {
		http = http.Msg(3, Entry(headers[i], headers[i+1]))
	}
	http = http.Str(4, path).Str(5, "app.example.com")
	attrs := Wire{}.Msg(1, Wire{}.Msg(1, Wire{}.Msg(1, socket))).Msg(4, Wire{}.Msg(2, http))
	if domain != "" {
		attrs = attrs.Msg(10, Entry("domain", domain))
	}
	return Wire{}.Msg(1, attrs)
}
