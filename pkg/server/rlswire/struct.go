package rlswire

// google.protobuf.Struct, the response's dynamic_metadata: a map of
// Values (fields = 1; an entry is key = 1, value = 2, both written even
// when empty, as proto does), each Value one member of a oneof (written
// whatever its value), lists and structs nested in them.

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

func sizeStruct(s *structpb.Struct) int {
	n := 0
	for k, v := range s.GetFields() {
		n += sizeMessage(sizeMessage(len(k)) + sizeMessage(sizeValue(v)))
	}
	return n
}

func sizeList(l *structpb.ListValue) int {
	n := 0
	for _, v := range l.GetValues() {
		n += sizeMessage(sizeValue(v))
	}
	return n
}

func sizeValue(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return 1 + varintLen(uint64(k.NullValue))
	case *structpb.Value_NumberValue:
		return 1 + 8
	case *structpb.Value_StringValue:
		return sizeMessage(len(k.StringValue))
	case *structpb.Value_BoolValue:
		return 1 + 1
	case *structpb.Value_StructValue:
		return sizeMessage(sizeStruct(k.StructValue))
	case *structpb.Value_ListValue:
		return sizeMessage(sizeList(k.ListValue))
	}
	return 0
}

// putStruct writes a Struct's fields, in the map's order.
func putStruct(b []byte, i int, s *structpb.Struct) int {
	for k, v := range s.GetFields() {
		end := i
		i = closeMessage(b, putValue(b, i, v), tagBytes2, end)
		i = closeMessage(b, putStringAlways(b, i, tagBytes1, k), tagBytes1, end)
	}
	return i
}

func putList(b []byte, i int, l *structpb.ListValue) int {
	vs := l.GetValues()
	for k := len(vs) - 1; k >= 0; k-- {
		end := i
		i = closeMessage(b, putValue(b, i, vs[k]), tagBytes1, end)
	}
	return i
}

func putValue(b []byte, i int, v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return putTagged(b, i, tagVarint1, uint64(k.NullValue))
	case *structpb.Value_NumberValue:
		return putDouble(b, i, tagFixed64x2, k.NumberValue)
	case *structpb.Value_StringValue:
		return putStringAlways(b, i, tagBytes3, k.StringValue)
	case *structpb.Value_BoolValue:
		return putTagged(b, i, tagVarint4, protowire.EncodeBool(k.BoolValue))
	case *structpb.Value_StructValue:
		end := i
		return closeMessage(b, putStruct(b, i, k.StructValue), tagBytes5, end)
	case *structpb.Value_ListValue:
		end := i
		return closeMessage(b, putList(b, i, k.ListValue), tagBytes6, end)
	}
	return i
}
