package wiretest

// Messages with every field set, built with the generated types (so valid
// UTF-8 throughout), for tests that compare a decoder with proto.Unmarshal
// on all of a request (pkg/server/lenient) or seed a fuzz target with it
// (pkg/server).

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FullRateLimitRequest sets every field of a RateLimitRequest.
func FullRateLimitRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "edge", HitsAddend: 3,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "alice"}, {Key: "path", Value: "/upload/x"}},
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
					RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2),
				},
				HitsAddend: wrapperspb.UInt64(7), IsNegativeHits: true,
			},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		},
	}
}

// FullCheckRequest is an ext_authz CheckRequest with the headers map,
// raw headers, context extensions, metadata with nested structs and the
// peers' addresses.
func FullCheckRequest() *authv3.CheckRequest {
	st, err := structpb.NewStruct(map[string]any{"a": map[string]any{"b": []any{1.5, "c", true, nil}}})
	if err != nil {
		panic(err)
	}
	peer := func(addr string, port uint32) *authv3.AttributeContext_Peer {
		return &authv3.AttributeContext_Peer{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
			}}},
			Service: "svc", Labels: map[string]string{"app": "web"}, Principal: "spiffe://x",
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: peer("10.0.0.1", 51000), Destination: peer("10.0.0.2", 443),
		Request: &authv3.AttributeContext_Request{
			Time: timestamppb.New(timestamppb.Now().AsTime()),
			Http: &authv3.AttributeContext_HttpRequest{
				Id: "1", Method: "POST", Path: "/upload", Host: "app.example.com", Scheme: "https", Protocol: "HTTP/2",
				Headers:   map[string]string{"x-user-id": "alice", "x-upload-size": "4", "": ""},
				HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-user-id", RawValue: []byte{0xff, 0}}}},
				Size:      -1, Body: "body", RawBody: []byte{0, 1, 2},
			},
		},
		ContextExtensions: map[string]string{"domain": "edge"},
		MetadataContext: &corev3.Metadata{
			FilterMetadata:      map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": st},
			TypedFilterMetadata: map[string]*anypb.Any{"t": {TypeUrl: "type.googleapis.com/x", Value: []byte{1}}},
		},
		TlsSession: &authv3.AttributeContext_TLSSession{Sni: "app.example.com"},
	}}
}
