package lenient

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

var (
	// errWireType is a wire type that does not fit its field: the field is
	// kept as an unknown one, as proto.Unmarshal does. It never leaves
	// this file.
	errWireType = errors.New("wire type does not fit the field")
	errDepth    = errors.New("lenient decode: exceeded maximum recursion depth")
	errGroup    = errors.New("lenient decode: group fields are not supported")
)

// Unmarshal resets m and decodes b into it as proto.Unmarshal would,
// except that string fields are not checked for valid UTF-8. It returns how
// many strings (fields, list elements, map keys and values) held invalid
// UTF-8 where proto.Unmarshal would have refused it.
func Unmarshal(b []byte, m proto.Message) (invalidUTF8 int, err error) {
	proto.Reset(m)
	var d decoder
	if err := d.message(b, m.ProtoReflect(), protowire.DefaultRecursionLimit); err != nil {
		return 0, err
	}
	if err := proto.CheckInitialized(m); err != nil {
		return 0, err
	}
	return d.invalidUTF8, nil
}

// decoder is one decode's state.
type decoder struct {
	invalidUTF8 int
}

// message decodes the fields in b into m, merging into what m holds.
// depth is how many more messages may nest, itself included.
func (d *decoder) message(b []byte, m protoreflect.Message, depth int) error {
	if depth--; depth < 0 {
		return errDepth
	}
	md := m.Descriptor()
	var unknown []byte
	for len(b) > 0 {
		tag, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return fmt.Errorf("lenient decode: %s: tag: %w", md.FullName(), protowire.ParseError(n))
		}
		if f := tag >> 3; f < uint64(protowire.MinValidNumber) || f > uint64(protowire.MaxValidNumber) {
			return fmt.Errorf("lenient decode: %s: field number %d out of range", md.FullName(), f)
		}
		num, wtyp := protowire.Number(tag>>3), protowire.Type(tag&7)
		b = b[n:]
		if wtyp == protowire.EndGroupType {
			return fmt.Errorf("lenient decode: %s: field %d: end of a group that never started", md.FullName(), num)
		}
		fd, err := fieldByNumber(md, num)
		if err != nil {
			return err
		}
		n, err = -1, errWireType
		if fd != nil {
			n, err = d.field(b, m, fd, wtyp, depth)
		}
		switch {
		case errors.Is(err, errWireType):
			if n = protowire.ConsumeFieldValue(num, wtyp, b); n < 0 {
				return fmt.Errorf("lenient decode: %s: field %d: %w", md.FullName(), num, protowire.ParseError(n))
			}
			unknown = protowire.AppendTag(unknown, num, wtyp)
			unknown = append(unknown, b[:n]...)
		case err != nil:
			// Not wrapped: at 10,000 levels of nesting, wrapping at each
			// would build megabytes of message.
			return err
		}
		b = b[n:]
	}
	if len(unknown) > 0 {
		if old := m.GetUnknown(); len(old) > 0 {
			unknown = append(old[:len(old):len(old)], unknown...)
		}
		m.SetUnknown(unknown)
	}
	return nil
}

// fieldByNumber is md's field num: a declared field, an extension of md
// registered in protoregistry.GlobalTypes (as proto.Unmarshal resolves
// them), or nil for an unknown field.
func fieldByNumber(md protoreflect.MessageDescriptor, num protowire.Number) (protoreflect.FieldDescriptor, error) {
	if fd := md.Fields().ByNumber(num); fd != nil {
		return fd, nil
	}
	if !md.ExtensionRanges().Has(num) {
		return nil, nil
	}
	xt, err := protoregistry.GlobalTypes.FindExtensionByNumber(md.FullName(), num)
	switch {
	case errors.Is(err, protoregistry.NotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("lenient decode: %s: extension %d: %w", md.FullName(), num, err)
	}
	return xt.TypeDescriptor(), nil
}

// field decodes one value of fd from b (just past its tag) into m and
// returns the bytes it used, or errWireType before changing m.
func (d *decoder) field(b []byte, m protoreflect.Message, fd protoreflect.FieldDescriptor, wtyp protowire.Type, depth int) (int, error) {
	switch {
	case fd.IsMap():
		if wtyp != protowire.BytesType {
			return 0, errWireType
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, fmt.Errorf("lenient decode: %s: %w", fd.FullName(), protowire.ParseError(n))
		}
		return n, d.mapEntry(v, m.Mutable(fd).Map(), fd, depth)
	case fd.IsList():
		return d.listElement(b, m, fd, wtyp, depth)
	case fd.Kind() == protoreflect.GroupKind:
		if wtyp != protowire.StartGroupType {
			return 0, errWireType
		}
		return 0, errGroup
	case fd.Kind() == protoreflect.MessageKind:
		if wtyp != protowire.BytesType {
			return 0, errWireType
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, fmt.Errorf("lenient decode: %s: %w", fd.FullName(), protowire.ParseError(n))
		}
		return n, d.message(v, m.Mutable(fd).Message(), depth)
	}
	v, n, err := d.scalar(b, fd, wtyp)
	if err != nil {
		return 0, err
	}
	m.Set(fd, v)
	return n, nil
}

// listElement decodes one element of the repeated field fd, or for a
// packable kind sent as bytes, a packed run of them, and appends it.
func (d *decoder) listElement(b []byte, m protoreflect.Message, fd protoreflect.FieldDescriptor, wtyp protowire.Type, depth int) (int, error) {
	kind := fd.Kind()
	switch {
	case kind == protoreflect.GroupKind:
		if wtyp != protowire.StartGroupType {
			return 0, errWireType
		}
		return 0, errGroup
	case kind == protoreflect.MessageKind:
		if wtyp != protowire.BytesType {
			return 0, errWireType
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, fmt.Errorf("lenient decode: %s: %w", fd.FullName(), protowire.ParseError(n))
		}
		list := m.Mutable(fd).List()
		e := list.NewElement()
		if err := d.message(v, e.Message(), depth); err != nil {
			return 0, err
		}
		list.Append(e)
		return n, nil
	case wtyp == protowire.BytesType && packable(kind):
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, fmt.Errorf("lenient decode: %s: %w", fd.FullName(), protowire.ParseError(n))
		}
		list := m.Mutable(fd).List()
		for len(v) > 0 {
			e, k, err := d.scalar(v, fd, wireType(kind))
			if err != nil {
				return 0, err
			}
			list.Append(e)
			v = v[k:]
		}
		return n, nil
	}
	e, n, err := d.scalar(b, fd, wtyp)
	if err != nil {
		return 0, err
	}
	m.Mutable(fd).List().Append(e)
	return n, nil
}

// mapEntry decodes one entry of the map field fd and sets it in mp. A key
// or value the entry leaves out is its zero value; fields other than key
// and value, or of the wrong wire type, are skipped.
func (d *decoder) mapEntry(b []byte, mp protoreflect.Map, fd protoreflect.FieldDescriptor, depth int) error {
	if depth--; depth < 0 {
		return errDepth
	}
	kd, vd := fd.MapKey(), fd.MapValue()
	key := kd.Default()
	var val protoreflect.Value
	if vd.Kind() == protoreflect.MessageKind {
		val = mp.NewValue()
	} else {
		val = vd.Default()
	}
	for len(b) > 0 {
		num, wtyp, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("lenient decode: %s: entry tag: %w", fd.FullName(), protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("lenient decode: %s: entry field number %d out of range", fd.FullName(), num)
		}
		b = b[n:]
		err := errWireType
		switch {
		case num == 1:
			key, n, err = d.scalarOr(b, kd, wtyp, key)
		case num == 2 && vd.Kind() == protoreflect.MessageKind:
			if wtyp == protowire.BytesType {
				var v []byte
				if v, n = protowire.ConsumeBytes(b); n < 0 {
					return fmt.Errorf("lenient decode: %s: value: %w", fd.FullName(), protowire.ParseError(n))
				}
				err = d.message(v, val.Message(), depth)
			}
		case num == 2:
			val, n, err = d.scalarOr(b, vd, wtyp, val)
		}
		switch {
		case errors.Is(err, errWireType):
			if n = protowire.ConsumeFieldValue(num, wtyp, b); n < 0 {
				return fmt.Errorf("lenient decode: %s: entry field %d: %w", fd.FullName(), num, protowire.ParseError(n))
			}
		case err != nil:
			return err
		}
		b = b[n:]
	}
	mp.Set(key.MapKey(), val)
	return nil
}

// scalarOr is scalar, returning old in place of the value on an error.
func (d *decoder) scalarOr(b []byte, fd protoreflect.FieldDescriptor, wtyp protowire.Type, old protoreflect.Value) (protoreflect.Value, int, error) {
	v, n, err := d.scalar(b, fd, wtyp)
	if err != nil {
		return old, n, err
	}
	return v, n, nil
}

// scalar decodes one value of fd's scalar kind (not a message or group),
// or returns errWireType when wtyp is not the kind's. Strings keep their
// bytes; bytes are copied out of b.
func (d *decoder) scalar(b []byte, fd protoreflect.FieldDescriptor, wtyp protowire.Type) (protoreflect.Value, int, error) {
	kind := fd.Kind()
	want := wireType(kind)
	if wtyp != want || want < 0 {
		return protoreflect.Value{}, 0, errWireType
	}
	var (
		v   uint64
		raw []byte
		n   int
	)
	switch want {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b)
	case protowire.Fixed32Type:
		var u uint32
		u, n = protowire.ConsumeFixed32(b)
		v = uint64(u)
	case protowire.Fixed64Type:
		v, n = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		raw, n = protowire.ConsumeBytes(b)
	}
	if n < 0 {
		return protoreflect.Value{}, 0, fmt.Errorf("lenient decode: %s: %w", fd.FullName(), protowire.ParseError(n))
	}
	switch kind {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(protowire.DecodeBool(v)), n, nil
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(v))), n, nil
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(v)), n, nil
	case protoreflect.Sint32Kind:
		return protoreflect.ValueOfInt32(int32(protowire.DecodeZigZag(v & math.MaxUint32))), n, nil
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(v)), n, nil
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(v)), n, nil
	case protoreflect.Sint64Kind:
		return protoreflect.ValueOfInt64(protowire.DecodeZigZag(v)), n, nil
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(v), n, nil
	case protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(v)), n, nil
	case protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v)), n, nil
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(math.Float32frombits(uint32(v))), n, nil
	case protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(v)), n, nil
	case protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(v), n, nil
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(math.Float64frombits(v)), n, nil
	case protoreflect.StringKind:
		if !utf8.Valid(raw) && enforcesUTF8(fd) {
			d.invalidUTF8++
		}
		return protoreflect.ValueOfString(string(raw)), n, nil
	default: // BytesKind
		return protoreflect.ValueOfBytes(append([]byte{}, raw...)), n, nil
	}
}

// enforcesUTF8 reports whether proto.Unmarshal refuses invalid UTF-8 in
// the string field fd: in proto3, and in editions where the field's
// features say so (as google.golang.org/protobuf/internal/strs decides).
func enforcesUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// wireType is the wire type of one value of a scalar kind, -1 for a
// message or group.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind,
		protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind:
		return protowire.BytesType
	}
	return -1
}

// packable reports whether repeated values of k may come packed: every
// scalar kind but strings and bytes.
func packable(k protoreflect.Kind) bool {
	t := wireType(k)
	return t >= 0 && t != protowire.BytesType
}
