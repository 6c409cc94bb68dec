package lenient

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// allKinds is a proto3 message, built at run time (dynamicpb), with a
// field of every kind the lenient decoder reads: each scalar kind singular
// (numbers 1-16), repeated packed (21-36) and repeated unpacked (41-56), a
// child message (60), repeated children (61), a proto3 optional (62), a
// oneof of a string, a message and an int64 (70-72) and maps with keys and
// values of several kinds (80-84). No generated Envoy message has all of
// them.
var allKinds = sync.OnceValue(func() protoreflect.MessageType {
	fd, err := protodesc.NewFile(allKindsFile(), protoregistry.GlobalFiles)
	if err != nil {
		panic(fmt.Sprintf("allKinds descriptor: %v", err))
	}
	return dynamicpb.NewMessageType(fd.Messages().ByName("AllKinds"))
})

// scalarKinds are the scalar field types, in field-number order.
var scalarKinds = []descriptorpb.FieldDescriptorProto_Type{
	descriptorpb.FieldDescriptorProto_TYPE_BOOL,
	descriptorpb.FieldDescriptorProto_TYPE_INT32,
	descriptorpb.FieldDescriptorProto_TYPE_SINT32,
	descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	descriptorpb.FieldDescriptorProto_TYPE_INT64,
	descriptorpb.FieldDescriptorProto_TYPE_SINT64,
	descriptorpb.FieldDescriptorProto_TYPE_UINT64,
	descriptorpb.FieldDescriptorProto_TYPE_SFIXED32,
	descriptorpb.FieldDescriptorProto_TYPE_FIXED32,
	descriptorpb.FieldDescriptorProto_TYPE_FLOAT,
	descriptorpb.FieldDescriptorProto_TYPE_SFIXED64,
	descriptorpb.FieldDescriptorProto_TYPE_FIXED64,
	descriptorpb.FieldDescriptorProto_TYPE_DOUBLE,
	descriptorpb.FieldDescriptorProto_TYPE_STRING,
	descriptorpb.FieldDescriptorProto_TYPE_BYTES,
	descriptorpb.FieldDescriptorProto_TYPE_ENUM,
}

const (
	allKindsMsg  = ".tokengate.test.AllKinds"
	allKindsEnum = ".tokengate.test.AllKinds.Kind"
)

func allKindsFile() *descriptorpb.FileDescriptorProto {
	var (
		fields  []*descriptorpb.FieldDescriptorProto
		entries []*descriptorpb.DescriptorProto
	)
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, num int32, label *descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(num), Label: label, Type: typ.Enum()}
		switch typ {
		case descriptorpb.FieldDescriptorProto_TYPE_ENUM:
			f.TypeName = proto.String(allKindsEnum)
		case descriptorpb.FieldDescriptorProto_TYPE_MESSAGE:
			f.TypeName = proto.String(allKindsMsg)
		}
		return f
	}
	for i, k := range scalarKinds {
		n := int32(i)
		fields = append(fields, field(fmt.Sprintf("s%d", n+1), n+1, opt, k), field(fmt.Sprintf("p%d", n+21), n+21, rep, k))
		u := field(fmt.Sprintf("u%d", n+41), n+41, rep, k)
		if k != descriptorpb.FieldDescriptorProto_TYPE_STRING && k != descriptorpb.FieldDescriptorProto_TYPE_BYTES {
			u.Options = &descriptorpb.FieldOptions{Packed: proto.Bool(false)}
		}
		fields = append(fields, u)
	}
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	optional := field("opt", 62, opt, descriptorpb.FieldDescriptorProto_TYPE_INT32)
	optional.Proto3Optional, optional.OneofIndex = proto.Bool(true), proto.Int32(1)
	fields = append(fields, field("child", 60, opt, msg), field("children", 61, rep, msg), optional)
	for i, typ := range []descriptorpb.FieldDescriptorProto_Type{descriptorpb.FieldDescriptorProto_TYPE_STRING, msg, descriptorpb.FieldDescriptorProto_TYPE_INT64} {
		f := field(fmt.Sprintf("o%d", 70+i), int32(70+i), opt, typ)
		f.OneofIndex = proto.Int32(0)
		fields = append(fields, f)
	}
	maps := []struct {
		name     string
		key, val descriptorpb.FieldDescriptorProto_Type
	}{
		{"ss", descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_STRING},
		{"im", descriptorpb.FieldDescriptorProto_TYPE_INT32, msg},
		{"bb", descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_BYTES},
		{"se", descriptorpb.FieldDescriptorProto_TYPE_SINT64, descriptorpb.FieldDescriptorProto_TYPE_ENUM},
		{"fd", descriptorpb.FieldDescriptorProto_TYPE_FIXED32, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE},
	}
	for i, m := range maps {
		entry := string(m.name[0]-'a'+'A') + m.name[1:] + "Entry"
		entries = append(entries, &descriptorpb.DescriptorProto{
			Name:    proto.String(entry),
			Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, opt, m.key), field("value", 2, opt, m.val)},
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
		})
		f := field(m.name, int32(80+i), rep, msg)
		f.TypeName = proto.String(allKindsMsg + "." + entry)
		fields = append(fields, f)
	}
	return &descriptorpb.FileDescriptorProto{
		Name:    proto.String("tokengate/test/all_kinds.proto"),
		Package: proto.String("tokengate.test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name:       proto.String("AllKinds"),
			Field:      fields,
			NestedType: entries,
			OneofDecl:  []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}, {Name: proto.String("_opt")}},
			EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Kind"), Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("ZERO"), Number: proto.Int32(0)}, {Name: proto.String("ONE"), Number: proto.Int32(1)},
			}}},
		}},
	}
}
