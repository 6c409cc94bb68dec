package server

import (
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMarshaler is what go-control-plane's vtprotobuf-generated code adds to
// its messages: marshalling without reflection.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// codec is gRPC's proto codec with one change: messages that have
// vtprotobuf marshalling (every ratelimit.v3 response) are marshalled by it,
// into a pooled buffer, which saves the reflection walk of every response.
// Unmarshalling, and marshalling of any other message, is the proto codec's.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(protoenc.Name)} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (codec) Name() string { return protoenc.Name }
