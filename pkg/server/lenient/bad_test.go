package lenient

import (
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tokengate/tokengate/internal/wiretest"
)

// TestLenientInvalidUTF8: what proto.Unmarshal refuses for invalid UTF-8
// in the domain, a descriptor key or value, or an ext_authz header, the
// lenient decoder accepts with the bytes exactly as sent, and counts.
func TestLenientInvalidUTF8(t *testing.T) {
	rls := func(f func(*rlsv3.RateLimitRequest) string) func(proto.Message) string {
		return func(m proto.Message) string { return f(m.(*rlsv3.RateLimitRequest)) }
	}
	http := func(f func(*authv3.AttributeContext_HttpRequest) string) func(proto.Message) string {
		return func(m proto.Message) string {
			return f(m.(*authv3.CheckRequest).GetAttributes().GetRequest().GetHttp())
		}
	}
	value := rls(func(r *rlsv3.RateLimitRequest) string { return r.Descriptors[0].Entries[0].Value })
	tests := []struct {
		name    string
		msg     proto.Message
		b       wire
		n       int
		get     func(proto.Message) string
		want    string
		another func(proto.Message) string // a valid string beside it, read back as "ok"
	}{
		{"domain", &rlsv3.RateLimitRequest{}, wiretest.RateLimitRequest("\xffedge", 1, wiretest.Descriptor("user_id", "ok")), 1,
			rls(func(r *rlsv3.RateLimitRequest) string { return r.Domain }), "\xffedge", value},
		{"descriptor key", &rlsv3.RateLimitRequest{}, wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user\xff", "ok")), 1,
			rls(func(r *rlsv3.RateLimitRequest) string { return r.Descriptors[0].Entries[0].Key }), "user\xff", value},
		{"descriptor value 0xff", &rlsv3.RateLimitRequest{}, wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "\xff"), wiretest.Descriptor("k", "ok")), 1,
			value, "\xff", rls(func(r *rlsv3.RateLimitRequest) string { return r.Descriptors[1].Entries[0].Value })},
		{"descriptor value: overlong, surrogate, truncated, NUL", &rlsv3.RateLimitRequest{},
			wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "\xc0\xaf\xed\xa0\x80\x00\xe2\x82", "b", "\x80"), wiretest.Descriptor("k", "ok")), 2,
			value, "\xc0\xaf\xed\xa0\x80\x00\xe2\x82", rls(func(r *rlsv3.RateLimitRequest) string { return r.Descriptors[1].Entries[0].Value })},
		{"ext_authz header value", &authv3.CheckRequest{}, wiretest.CheckRequest("10.0.0.1", "edge", "/", "x-user-id", "\xff\xfe"), 1,
			http(func(h *authv3.AttributeContext_HttpRequest) string { return h.Headers["x-user-id"] }), "\xff\xfe",
			http(func(h *authv3.AttributeContext_HttpRequest) string { return map[bool]string{true: "ok"}[h.Path == "/"] })},
		{"ext_authz header name", &authv3.CheckRequest{}, wiretest.CheckRequest("10.0.0.1", "edge", "/", "x-\xff", "v"), 1,
			http(func(h *authv3.AttributeContext_HttpRequest) string { return h.Headers["x-\xff"] }), "v",
			http(func(h *authv3.AttributeContext_HttpRequest) string {
				return map[bool]string{true: "ok"}[h.Host == "app.example.com"]
			})},
		{"ext_authz path and domain", &authv3.CheckRequest{}, wiretest.CheckRequest("10.0.0.1", "\xfe", "/\xff", "x-user-id", "ok"), 2,
			http(func(h *authv3.AttributeContext_HttpRequest) string { return h.Path }), "/\xff",
			http(func(h *authv3.AttributeContext_HttpRequest) string { return h.Headers["x-user-id"] })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := proto.Unmarshal(tc.b, proto.Clone(tc.msg)); err == nil {
				t.Fatal("proto.Unmarshal accepts it: the test shows nothing")
			}
			m := proto.Clone(tc.msg)
			n, err := Unmarshal(tc.b, m)
			if err != nil || n != tc.n {
				t.Fatalf("Unmarshal: %d invalid strings (want %d), %v", n, tc.n, err)
			}
			if got := tc.get(m); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if got := tc.another(m); got != "ok" {
				t.Fatalf("the valid string beside it: %q", got)
			}
		})
	}
}

// TestLenientMalformed: wire data proto.Unmarshal refuses for anything
// but UTF-8, the lenient decoder refuses too.
func TestLenientMalformed(t *testing.T) {
	rls := (&rlsv3.RateLimitRequest{}).ProtoReflect().Type()
	check := (&authv3.CheckRequest{}).ProtoReflect().Type()
	tag := func(num protowire.Number, typ protowire.Type) wire { return protowire.AppendTag(nil, num, typ) }
	// A descriptor's value whose length runs past its entry.
	overrun := wire{}.Msg(2, wire{}.Msg(1, append(protowire.AppendVarint(tag(2, protowire.BytesType), 9), "ab"...)))
	// structpb.Value nested deeper than the recursion limit:
	// list_value = 6, values = 1.
	deep := wire{}.Str(2, "x")
	for range protowire.DefaultRecursionLimit/2 + 1 {
		deep = wire{}.Msg(6, wire{}.Msg(1, deep))
	}
	// A NamePart without its required is_extension: uninterpreted_option =
	// 999, name = 2, name_part = 1.
	missing := wire{}.Msg(999, wire{}.Msg(2, wire{}.Str(1, "x")))
	tests := []struct {
		name string
		typ  protoreflect.MessageType
		b    wire
	}{
		{"truncated tag", rls, wire{0x80}},
		{"field number 0", rls, wire{0x00, 0x01}},
		{"field number above the maximum", rls, protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)},
		{"wire type 6", rls, wire{1<<3 | 6, 0}},
		{"wire type 7", rls, wire{1<<3 | 7, 0}},
		{"end of a group that never started", rls, tag(9, protowire.EndGroupType)},
		{"an unknown group never ended", rls, append(tag(9, protowire.StartGroupType), wire{}.Varint(1, 1)...)},
		{"truncated varint", rls, wire{3 << 3, 0x80, 0x80}},
		{"varint of 11 bytes", rls, append(wire{3 << 3}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)},
		{"length past the end", rls, append(protowire.AppendVarint(tag(1, protowire.BytesType), 5), "ed"...)},
		{"truncated fixed64 in an unknown field", rls, append(tag(20, protowire.Fixed64Type), 1, 2, 3)},
		{"a descriptor's value runs past its entry", rls, overrun},
		{"truncated header map entry", check, wire{}.Msg(1, wire{}.Msg(4, wire{}.Msg(2, wire{}.Msg(3, wire{0x0a, 0x05, 'x'}))))},
		{"header map entry with field number 0", check, wire{}.Msg(1, wire{}.Msg(4, wire{}.Msg(2, wire{}.Msg(3, wire{0x00, 0x00}))))},
		{"packed path with a truncated varint", (&descriptorpb.SourceCodeInfo_Location{}).ProtoReflect().Type(), wire{}.Msg(1, wire{0x01, 0x80})},
		{"packed fixed32 of 3 bytes", allKinds(), wire{}.Msg(29, wire{1, 2, 3})},
		{"nesting past the recursion limit", (&structpb.Value{}).ProtoReflect().Type(), deep},
		{"a required field missing", (&descriptorpb.FieldOptions{}).ProtoReflect().Type(), missing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := proto.Unmarshal(tc.b, tc.typ.New().Interface()); err == nil {
				t.Fatal("proto.Unmarshal accepts it: the test shows nothing")
			}
			if n, err := Unmarshal(tc.b, tc.typ.New().Interface()); err == nil {
				t.Fatalf("Unmarshal accepts it (%d invalid strings)", n)
			}
		})
	}
}

// TestLenientPrefixes: every prefix of a request, with invalid UTF-8 in it
// or not, is accepted by the lenient decoder exactly when proto.Unmarshal
// accepts it or refuses it for UTF-8 alone; the valid prefixes decode the
// same.
func TestLenientPrefixes(t *testing.T) {
	full, err := proto.Marshal(wiretest.FullCheckRequest())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		typ  protoreflect.MessageType
		b    wire
	}{
		{"CheckRequest", (&authv3.CheckRequest{}).ProtoReflect().Type(), full},
		{"CheckRequest with an invalid header", (&authv3.CheckRequest{}).ProtoReflect().Type(), wiretest.CheckRequest("10.0.0.1", "edge", "/", "x-user-id", "\xff", "b", "c")},
		{"RateLimitRequest with an invalid value", (&rlsv3.RateLimitRequest{}).ProtoReflect().Type(),
			wiretest.RateLimitRequest("edge", 2, wiretest.Descriptor("user_id", "\xfe"), wiretest.Descriptor("k", "v"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			accepted := 0
			for i := range len(tc.b) + 1 {
				want, got := tc.typ.New().Interface(), tc.typ.New().Interface()
				perr := proto.Unmarshal(tc.b[:i], want)
				_, lerr := Unmarshal(tc.b[:i], got)
				switch {
				case perr == nil && (lerr != nil || !proto.Equal(want, got)):
					t.Fatalf("prefix %d: proto accepts, lenient: %v\n%v\n%v", i, lerr, got, want)
				case perr != nil && lerr == nil && !isUTF8Error(perr):
					t.Fatalf("prefix %d: proto refuses (%v), lenient accepts", i, perr)
				case lerr == nil:
					accepted++
				}
			}
			if accepted < 2 {
				t.Fatalf("only %d prefixes decode: the test shows little", accepted)
			}
		})
	}
}

// isUTF8Error reports whether proto.Unmarshal refused for invalid UTF-8.
func isUTF8Error(err error) bool { return strings.Contains(err.Error(), "invalid UTF-8") }
