package lenient

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/protorand"
)

// randomTypes are the messages the properties draw from, with the depth
// to fill them to: the two requests, a proto2 message with packed fields
// and extensions, and the run-time message of every kind.
func randomTypes() []struct {
	typ   protoreflect.MessageType
	depth int
} {
	return []struct {
		typ   protoreflect.MessageType
		depth int
	}{
		{(&rlsv3.RateLimitRequest{}).ProtoReflect().Type(), 4},
		{(&authv3.CheckRequest{}).ProtoReflect().Type(), 4},
		{(&descriptorpb.SourceCodeInfo{}).ProtoReflect().Type(), 2},
		{(&descriptorpb.FieldOptions{}).ProtoReflect().Type(), 2},
		{allKinds(), 1},
	}
}

// TestLenientMatchesProtoRapid: for random messages proto.Marshal writes,
// the lenient decoder gives what proto.Unmarshal gives, including the
// refusal of a proto2 message missing a required field, and finds no
// invalid UTF-8.
func TestLenientMatchesProtoRapid(t *testing.T) {
	types := randomTypes()
	rapid.Check(t, func(t *rapid.T) {
		typ := types[rapid.IntRange(0, len(types)-1).Draw(t, "type")]
		src := typ.typ.New()
		protorand.Fill(t, src, typ.depth)
		opts := proto.MarshalOptions{AllowPartial: true, Deterministic: rapid.Bool().Draw(t, "deterministic")}
		b, err := opts.Marshal(src.Interface())
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		compareDecoders(t, typ.typ, b, true)
	})
}

// TestLenientMutationsRapid: for wire data that is a marshalled message
// with bytes changed, inserted or cut, the lenient decoder accepts what
// proto.Unmarshal accepts, with the same result, and accepts more only
// where proto.Unmarshal refused invalid UTF-8, which it then counts. Only
// generated messages: for dynamicpb ones proto.Unmarshal keeps an unknown
// field's tag as written, the generated code (and the lenient decoder) in
// its shortest form.
func TestLenientMutationsRapid(t *testing.T) {
	types := randomTypes()[:4]
	rapid.Check(t, func(t *rapid.T) {
		typ := types[rapid.IntRange(0, len(types)-1).Draw(t, "type")]
		src := typ.typ.New()
		protorand.Fill(t, src, typ.depth)
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(src.Interface())
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		for range rapid.IntRange(1, 2).Draw(t, "mutations") {
			b = protorand.Mutate(t, b)
		}
		compareDecoders(t, typ.typ, b, false)
	})
}

// compareDecoders decodes b with proto.Unmarshal and Unmarshal.
// With valid set, b is known to be valid UTF-8 throughout: both must agree
// exactly. Otherwise the lenient decoder may also accept what proto refused
// for invalid UTF-8, and must then report it.
func compareDecoders(t *rapid.T, typ protoreflect.MessageType, b []byte, valid bool) {
	want, got := typ.New().Interface(), typ.New().Interface()
	perr := proto.Unmarshal(b, want)
	n, lerr := Unmarshal(b, got)
	switch {
	case perr == nil && lerr != nil:
		t.Fatalf("proto accepts %x, lenient refuses: %v", b, lerr)
	case perr == nil && (!proto.Equal(want, got) || n != 0):
		t.Fatalf("%x: lenient decoded\n%v (%d invalid strings), proto\n%v", b, got, n, want)
	case perr != nil && lerr == nil && (valid || n == 0 || !isUTF8Error(perr)):
		t.Fatalf("proto refuses %x (%v), lenient accepts with %d invalid strings: %v", b, perr, n, got)
	}
}
