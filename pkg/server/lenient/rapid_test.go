package lenient

import (
	"math"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"pgregory.net/rapid"
)

// fill sets random values on a random subset (three in four) of m's fields, messages at
// most depth levels below m. Strings are valid UTF-8: these are messages
// proto.Marshal writes.
func fill(t *rapid.T, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		isMsg := fd.Message() != nil && !fd.IsMap()
		if (isMsg && depth == 0) || rapid.IntRange(0, 3).Draw(t, string(fd.Name())) == 0 {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rapid.IntRange(0, 2).Draw(t, "entries") {
				k := randomScalar(t, fd.MapKey())
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					if depth > 0 {
						fill(t, v.Message(), depth-1)
					}
					mp.Set(k.MapKey(), v)
				} else {
					mp.Set(k.MapKey(), randomScalar(t, fd.MapValue()))
				}
			}
		case fd.IsList():
			list := m.Mutable(fd).List()
			for range rapid.IntRange(0, 2).Draw(t, "elements") {
				if isMsg {
					e := list.NewElement()
					fill(t, e.Message(), depth-1)
					list.Append(e)
				} else {
					list.Append(randomScalar(t, fd))
				}
			}
		case isMsg:
			fill(t, m.Mutable(fd).Message(), depth-1)
		default:
			m.Set(fd, randomScalar(t, fd))
		}
	}
}

// randomScalar is a random value of fd's scalar kind.
func randomScalar(t *rapid.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rapid.Bool().Draw(t, "bool"))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(rapid.Int32().Draw(t, "enum")))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(rapid.Int32().Draw(t, "int32"))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(rapid.Uint32().Draw(t, "uint32"))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(rapid.Int64().Draw(t, "int64"))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(rapid.Uint64().Draw(t, "uint64"))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(math.Float32frombits(rapid.Uint32().Draw(t, "float")))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(math.Float64frombits(rapid.Uint64().Draw(t, "double")))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(rapid.StringN(0, 6, -1).Draw(t, "string"))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, "bytes"))
	}
	panic("randomScalar: not a scalar: " + fd.FullName())
}

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
		fill(t, src, typ.depth)
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
		fill(t, src, typ.depth)
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(src.Interface())
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		for range rapid.IntRange(1, 2).Draw(t, "mutations") {
			b = mutate(t, b)
		}
		compareDecoders(t, typ.typ, b, false)
	})
}

// mutate changes, inserts or deletes one byte of b, or cuts it short.
func mutate(t *rapid.T, b []byte) []byte {
	if len(b) == 0 {
		return []byte{rapid.Byte().Draw(t, "byte")}
	}
	i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
	switch rapid.IntRange(0, 3).Draw(t, "mutation") {
	case 0:
		b[i] = rapid.Byte().Draw(t, "byte")
	case 1:
		b = append(b[:i:i], append([]byte{rapid.Byte().Draw(t, "byte")}, b[i:]...)...)
	case 2:
		b = append(b[:i:i], b[i+1:]...)
	default:
		b = b[:i]
	}
	return b
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
