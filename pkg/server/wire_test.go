package server

import "google.golang.org/protobuf/encoding/protowire"

// wire builds protobuf wire data field by field, for requests that
// proto.Marshal refuses to write (strings that are not UTF-8). Field
// numbers are those of the .proto files named beside each builder.
type wire []byte

func (w wire) str(num protowire.Number, s string) wire {
	return protowire.AppendString(protowire.AppendTag(w, num, protowire.BytesType), s)
}

func (w wire) msg(num protowire.Number, sub wire) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), sub)
}

func (w wire) varint(num protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, num, protowire.VarintType), v)
}

// entry is a map entry, or any message of key = 1 and value = 2 strings
// (RateLimitDescriptor.Entry).
func entry(key, value string) wire { return wire{}.str(1, key).str(2, value) }

// descriptorWire is an envoy.extensions.common.ratelimit.v3
// RateLimitDescriptor of key, value pairs (entries = 1).
func descriptorWire(kv ...string) wire {
	var w wire
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.msg(1, entry(kv[i], kv[i+1]))
	}
	return w
}

// rateLimitRequestWire is an envoy.service.ratelimit.v3 RateLimitRequest
// (domain = 1, descriptors = 2, hits_addend = 3).
func rateLimitRequestWire(domain string, hits uint32, descriptors ...wire) wire {
	w := wire{}.str(1, domain)
	for _, d := range descriptors {
		w = w.msg(2, d)
	}
	if hits != 0 {
		w = w.varint(3, uint64(hits))
	}
	return w
}

// checkRequestWire is an envoy.service.auth.v3 CheckRequest (attributes =
// 1) from source, of a GET of path with the headers (header name, value
// pairs) and the context extension domain when not empty:
// AttributeContext (source = 1, request = 4, context_extensions = 10),
// Peer (address = 1), Address (socket_address = 1), SocketAddress
// (address = 2, port_value = 3), Request (http = 2), HttpRequest (id = 1,
// method = 2, headers = 3, path = 4, host = 5).
func checkRequestWire(source, domain, path string, headers ...string) wire {
	socket := wire{}.str(2, source).varint(3, 51000)
	http := wire{}.str(1, "1").str(2, "GET")
	for i := 0; i+1 < len(headers); i += 2 {
		http = http.msg(3, entry(headers[i], headers[i+1]))
	}
	http = http.str(4, path).str(5, "app.example.com")
	attrs := wire{}.msg(1, wire{}.msg(1, wire{}.msg(1, socket))).msg(4, wire{}.msg(2, http))
	if domain != "" {
		attrs = attrs.msg(10, entry("domain", domain))
	}
	return wire{}.msg(1, attrs)
}
