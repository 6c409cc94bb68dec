package wiretest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The methods the tests call.
const (
	ShouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	Check           = "/envoy.service.auth.v3.Authorization/Check"
)

// Invoke calls method on conn with the wire data req, sent as it is, and
// decodes the answer into resp.
func Invoke(ctx context.Context, conn grpc.ClientConnInterface, method string, req Wire, resp proto.Message) error {
	var out []byte
	if err := conn.Invoke(ctx, method, &req, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return err
	}
	return proto.Unmarshal(out, resp)
}

// rawCodec sends a *Wire as it is and receives into a *[]byte.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*Wire))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
