package lenient

import (
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/envoy/annotations"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/tokengate/tokengate/internal/wiretest"
)

// wire is protobuf wire data built by hand (internal/wiretest).
type wire = wiretest.Wire

// fieldOptions is a proto2 message with closed enums, a repeated enum,
// registered extensions (a bool and a string) and a field of a message
// that has required fields.
func fieldOptions() *descriptorpb.FieldOptions {
	o := &descriptorpb.FieldOptions{
		Ctype: descriptorpb.FieldOptions_CORD.Enum(), Packed: proto.Bool(true), Lazy: proto.Bool(false),
		Targets: []descriptorpb.FieldOptions_OptionTargetType{descriptorpb.FieldOptions_TARGET_TYPE_FIELD, descriptorpb.FieldOptions_TARGET_TYPE_FILE},
		UninterpretedOption: []*descriptorpb.UninterpretedOption{{
			Name: []*descriptorpb.UninterpretedOption_NamePart{{NamePart: proto.String("x"), IsExtension: proto.Bool(true)}}, PositiveIntValue: proto.Uint64(9),
		}},
	}
	proto.SetExtension(o, annotations.E_DisallowedByDefault, true)
	proto.SetExtension(o, annotations.E_DeprecatedAtMinorVersion, "3.0")
	return o
}

// fullAllKinds sets every field of allKinds, the maps and lists to two
// elements each.
func fullAllKinds(t *testing.T) protoreflect.Message {
	t.Helper()
	m := allKinds().New()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(kindValue(fd.MapKey(), 1).MapKey(), kindValue(fd.MapValue(), 1))
			v := mp.NewValue()
			if fd.MapValue().Message() == nil {
				v = kindValue(fd.MapValue(), 2)
			}
			mp.Set(kindValue(fd.MapKey(), 2).MapKey(), v)
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(kindValue(fd, 1))
			l.Append(kindValue(fd, -2))
		case fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() && fd.Number() != 71:
			// Only the message member of the oneof is kept.
		default:
			m.Set(fd, kindValue(fd, -3))
		}
	}
	return m
}

// kindValue is a value of fd's kind made from i: a message holds i in s2.
func kindValue(fd protoreflect.FieldDescriptor, i int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(i > 0)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(i))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(i) << 28)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i) << 28)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(i) << 60)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i) << 60)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(i) / 3)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(i) / 3)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strings.Repeat("é", i+3))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(strings.Repeat("\xff", i+3)))
	}
	m := allKinds().New()
	m.Set(m.Descriptor().Fields().ByNumber(2), protoreflect.ValueOfInt32(int32(i)))
	return protoreflect.ValueOfMessage(m)
}

// TestLenientMatchesProto: on valid wire data, marshalled or written by
// hand in the forms proto.Marshal does not write (unpacked where packed is
// declared, a wire type that does not fit, merged messages, oneof members
// replacing each other, partial map entries, unknown fields), the lenient
// decoder gives exactly what proto.Unmarshal gives.
func TestLenientMatchesProto(t *testing.T) {
	marshal := func(m proto.Message) wire {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rls := (&rlsv3.RateLimitRequest{}).ProtoReflect().Type()
	check := (&authv3.CheckRequest{}).ProtoReflect().Type()
	loc := (&descriptorpb.SourceCodeInfo_Location{}).ProtoReflect().Type()
	// An HttpRequest inside a CheckRequest: attributes = 1, request = 4, http = 2.
	inHTTP := func(http wire) wire { return wire{}.Msg(1, wire{}.Msg(4, wire{}.Msg(2, http))) }
	// A SocketAddress as the CheckRequest's source: attributes = 1,
	// source = 1, address = 1, socket_address = 1.
	inSocket := func(addr wire) wire { return wire{}.Msg(1, wire{}.Msg(1, wire{}.Msg(1, wire{}.Msg(1, addr)))) }
	group := func(num protowire.Number, fields wire) wire {
		return protowire.AppendTag(append(protowire.AppendTag(nil, num, protowire.StartGroupType), fields...), num, protowire.EndGroupType)
	}
	fixed32 := func(w wire, num protowire.Number, v uint32) wire {
		return protowire.AppendFixed32(protowire.AppendTag(w, num, protowire.Fixed32Type), v)
	}
	packed := func(num protowire.Number, vs ...uint64) wire {
		var p []byte
		for _, v := range vs {
			p = protowire.AppendVarint(p, v)
		}
		return wire{}.Msg(num, p)
	}
	tests := []struct {
		name string
		typ  protoreflect.MessageType
		b    wire
	}{
		{"empty RateLimitRequest", rls, nil},
		{"RateLimitRequest, every field", rls, marshal(wiretest.FullRateLimitRequest())},
		{"CheckRequest, headers map and nested attributes", check, marshal(wiretest.FullCheckRequest())},
		{"FieldOptions: proto2, extensions, closed enums", (&descriptorpb.FieldOptions{}).ProtoReflect().Type(), marshal(fieldOptions())},
		{"every kind, packed and unpacked", allKinds(), marshal(fullAllKinds(t).Interface())},
		{"domain twice: the last wins", rls, wire{}.Str(1, "a").Str(1, "edge")},
		{"hits_addend as fixed32: an unknown field", rls, fixed32(wire{}.Str(1, "edge"), 3, 5)},
		{"unknown fields of every wire type, kept in order", rls, wire(protowire.AppendFixed64(protowire.AppendTag(
			wire{}.Varint(99, 1).Str(100, "x"), 101, protowire.Fixed64Type), 7)).Msg(2, wire{}.Varint(15, 1))},
		{"an unknown group", rls, append(group(9, wire{}.Varint(1, 5).Msg(2, group(3, nil))), wire{}.Str(1, "edge")...)},
		{"a descriptor's limit in two parts, merged", rls, wire{}.Msg(2, wire{}.Msg(2, wire{}.Varint(1, 10)).Msg(2, wire{}.Varint(2, 2)))},
		{"a header map entry without a value, one without a key", check, inHTTP(wire{}.Msg(3, wire{}.Str(1, "x-user-id")).Msg(3, wire{}.Str(2, "v")))},
		{"a header map entry with an unknown field and a value of the wrong wire type", check,
			inHTTP(wire{}.Msg(3, wiretest.Entry("a", "b").Varint(3, 1)).Msg(3, wire{}.Str(1, "c").Varint(2, 1)))},
		{"a header twice: the last entry wins", check, inHTTP(wire{}.Msg(3, wiretest.Entry("k", "1")).Msg(3, wiretest.Entry("k", "2")))},
		{"oneof: pipe replaces the socket address", check,
			wire{}.Msg(1, wire{}.Msg(1, wire{}.Msg(1, wire{}.Msg(1, wire{}.Str(2, "10.0.0.1")).Msg(2, wire{}.Str(1, "/tmp/s")))))},
		{"oneof: the same member twice, merged", check, append(inSocket(wire{}.Str(2, "10.0.0.1")), inSocket(wire{}.Varint(3, 8080))...)},
		{"packed path, unpacked span", loc, packed(1, 1, 2, 300).Varint(2, 4).Varint(2, 5).Varint(1, 7)},
		{"every kind: unpacked where packed is declared and the reverse", allKinds(), wire{}.Varint(22, 1).Varint(22, 2).Msg(42, wire{}.Varint(1, 1<<40)).Varint(42, 3)},
		{"sint32 with bits above 32", allKinds(), wire{}.Varint(3, 1<<40|3)},
		{"oneof: an int64 after a message", allKinds(), wire{}.Msg(71, wire{}.Varint(2, 1)).Varint(72, 9)},
		{"a map of messages, merged values in one entry", allKinds(), wire{}.Msg(81, wire{}.Varint(1, 4).Msg(2, wire{}.Varint(2, 1)).Msg(2, wire{}.Varint(4, 2)))},
		{"an enum value the enum does not declare", allKinds(), wire{}.Varint(16, 77)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, got := tc.typ.New().Interface(), tc.typ.New().Interface()
			if err := proto.Unmarshal(tc.b, want); err != nil {
				t.Fatalf("proto.Unmarshal: %v", err)
			}
			// Decode onto a message that holds something: it is reset first.
			proto.Merge(got, want)
			n, err := Unmarshal(tc.b, got)
			if err != nil || n != 0 {
				t.Fatalf("Unmarshal: %d invalid strings, %v", n, err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("lenient:\n%v\nproto:\n%v", got, want)
			}
		})
	}
}
