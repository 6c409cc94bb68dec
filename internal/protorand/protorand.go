// Package protorand makes random protobuf data for rapid properties that
// compare a decoder or an encoder with google.golang.org/protobuf's
// (pkg/server/lenient, pkg/server/rlswire): messages with random fields
// set, and wire data with bytes changed.
package protorand

import (
	"math"

	"google.golang.org/protobuf/reflect/protoreflect"
	"pgregory.net/rapid"
)

// Fill sets random values on a random subset (three in four) of m's fields, messages at
// most depth levels below m. Strings are valid UTF-8: these are messages
// proto.Marshal writes.
func Fill(t *rapid.T, m protoreflect.Message, depth int) {
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
						Fill(t, v.Message(), depth-1)
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
					Fill(t, e.Message(), depth-1)
					list.Append(e)
				} else {
					list.Append(randomScalar(t, fd))
				}
			}
		case isMsg:
			Fill(t, m.Mutable(fd).Message(), depth-1)
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

// Mutate changes, inserts or deletes one byte of b, or cuts it short.
func Mutate(t *rapid.T, b []byte) []byte {
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
