package server

// FuzzRequest: the bytes of a gRPC request, as Envoy or anyone who reaches
// the port sends them, decoded by the server's codec and decided by the
// real service and front doors. A request that decodes must get an answer,
// or InvalidArgument exactly when its shape is one Envoy's configuration
// controls (pkg/service's "Bad requests"): any other error is one Envoy's
// failure_mode_deny: false lets through, past every limit.

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/wiretest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/frontdoor"
	"github.com/tokengate/tokengate/pkg/server/lenient"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// fuzzPolicy has a rule of each kind (limited with a cost and max_cost,
// shadow, unlimited), a request id key, and an ext_authz front door that
// reads the client address through one trusted proxy, a header, the path
// and a cost header.
const fuzzPolicy = `revision: 1
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 3
      refill: 1/s
    - name: uploads
      match: [{key: user_id}, {key: path, value: /upload/*}]
      capacity: 10
      refill: 1/s
      cost: 2
      max_cost: 5
    - name: per-client
      match: [{key: remote_address}]
      capacity: 2
      refill: 1/h
      shadow: true
    - name: health
      match: [{key: path, value: /healthz}]
      unlimited: true
front_doors:
  ext_authz:
    trusted_proxy_hops: 1
    domains:
      edge:
        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: x-user-id, descriptor_key: user_id}
            - path: {strip_query: true, strip_trailing_slash: true}
          hits_addend: {request_header: x-cost}
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
        - actions: [{request_headers: {header_name: x-request-id, descriptor_key: request_id}}]
`

// fuzzDomain is the one domain fuzzPolicy's ext_authz front door serves.
const fuzzDomain = "edge"

// fuzzServer is what the gRPC server runs for the two limiting RPCs, wired
// as startServer wires it, without the network: the codec, the ratelimit
// front door around the service, and ext_authz. It lives as long as the
// fuzz process; the memory store is small, so old buckets are evicted.
type fuzzServer struct {
	codec codec
	rls   rlsv3.RateLimitServiceServer
	authz authv3.AuthorizationServer
}

func newFuzzServer(t testing.TB) *fuzzServer {
	t.Helper()
	st := memory.New(memory.Options{Clock: new(clock.Fake), Shards: 4, MaxBuckets: 4096, MaxRequestIDs: 4096})
	s := newStack(t, fuzzPolicy, st)
	return &fuzzServer{codec: newCodec(s.m.InvalidUTF8, s.log, new(clock.Fake), newDecodeGate()), rls: s.doors.RateLimit(s.svc), authz: s.doors.ExtAuthz()}
}

func FuzzRequest(f *testing.F) {
	for _, seed := range requestSeeds(f) {
		f.Add([]byte(seed))
	}
	srv := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		lenientAgrees(t, data, new(rlsv3.RateLimitRequest), new(rlsv3.RateLimitRequest))
		lenientAgrees(t, data, new(authv3.CheckRequest), new(authv3.CheckRequest))
		srv.shouldRateLimit(t, data)
		srv.check(t, data)
	})
}

// requestSeeds are requests of both RPCs: ordinary, with invalid UTF-8,
// of each shape Envoy's configuration controls, with client-shaped
// values the service must refuse without an error, and malformed.
func requestSeeds(t testing.TB) []wire {
	marshal := func(m proto.Message) wire {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	d := wiretest.Descriptor
	rls := wiretest.RateLimitRequest
	check := wiretest.CheckRequest
	valid := rls("edge", 0, d("user_id", "alice"))
	return []wire{
		valid,
		valid[:len(valid)-1],
		rls("edge", 0, d("user_id", "\xff")),
		rls("edge", 7, d("user_id", "bob", "path", "/upload/x"), d("remote_address", "10.0.0.1"), d("request_id", "r-1")),
		rls("edge", 6, d("user_id", "bob", "path", "/upload/x")), // above max_cost: refused, not an error
		rls("edge", 0, d("user_id", strings.Repeat("v", service.MaxValueBytes+1))),
		rls("", 0, d("user_id", "alice")),
		rls("edge", 0),
		rls("edge", 0, d()),
		rls("edge", 0, d("", "x")),
		rls("other", 0, d("k", "v")),
		marshal(wiretest.FullRateLimitRequest()),
		check("10.0.0.1", "", "/", "x-user-id", "alice"),
		check("10.0.0.1", "", "/upload/../upload//x;jsessionid=1?q=1", "x-user-id", "\xfd", "x-cost", "4"),
		check("10.0.0.1", "edge", "/%75pload/x/", "x-user-id", "carol", "x-cost", "nine", "x-forwarded-for", "203.0.113.7, ::ffff:10.0.0.9"),
		check("10.0.0.1", "other", "/", "x-user-id", "alice"),
		check("10.0.0.1", "", "", "x-request-id", "r-1"),
		marshal(wiretest.FullCheckRequest()),
		marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Path: "/healthz", HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: "X-User-Id", RawValue: []byte("dave")}, {Key: "x-forwarded-for", Value: "198.51.100.1,198.51.100.2"},
			}}},
		}}}),
	}
}

// lenientAgrees: whenever proto.Unmarshal decodes data, the lenient decoder
// decodes it too, to the same message, and finds no invalid UTF-8.
func lenientAgrees(t *testing.T, data []byte, strict, loose proto.Message) {
	t.Helper()
	if proto.Unmarshal(data, strict) != nil {
		return
	}
	n, err := lenient.Unmarshal(data, loose)
	if err != nil || n != 0 {
		t.Fatalf("%T: proto.Unmarshal decodes it; the lenient decoder: %d invalid strings, %v", strict, n, err)
	}
	if !proto.Equal(strict, loose) && !sameWire(t, strict, loose) {
		t.Fatalf("%T: the decoders differ:\nproto:   %v\nlenient: %v", strict, strict, loose)
	}
}

// sameWire reports whether a and b marshal to the same bytes: the same
// message, NaNs included (proto.Equal holds a NaN unequal to itself).
func sameWire(t *testing.T, a, b proto.Message) bool {
	t.Helper()
	opts := proto.MarshalOptions{Deterministic: true}
	wa, err := opts.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := opts.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(wa, wb)
}

// envoyShaped reports whether req has a shape that Envoy's configuration,
// not a client, controls wrongly: the cases pkg/service's doc answers with
// InvalidArgument.
func envoyShaped(req *rlsv3.RateLimitRequest) bool {
	ds := req.GetDescriptors()
	if req.GetDomain() == "" || len(ds) == 0 || len(ds) > service.MaxDescriptors {
		return true
	}
	for _, d := range ds {
		if n := len(d.GetEntries()); n == 0 || n > service.MaxEntries {
			return true
		}
		for _, e := range d.GetEntries() {
			if k := len(e.GetKey()); k == 0 || k > service.MaxKeyBytes {
				return true
			}
		}
	}
	return false
}

func (s *fuzzServer) decode(data []byte, m proto.Message) bool {
	return s.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m) == nil
}

// marshals fails t unless the codec can write resp (a response it cannot
// write is an Internal error at Envoy), as bytes proto.Unmarshal reads
// back as resp.
func (s *fuzzServer) marshals(t *testing.T, resp proto.Message) {
	t.Helper()
	b, err := s.codec.Marshal(resp)
	if err != nil {
		t.Fatalf("%T cannot be written: %v\n%v", resp, err, resp)
	}
	defer b.Free()
	back := resp.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b.Materialize(), back); err != nil || !proto.Equal(back, resp) {
		t.Fatalf("%T written as\n%x\nread back as %v (%v)\nwant %v", resp, b.Materialize(), back, err, resp)
	}
}

func (s *fuzzServer) shouldRateLimit(t *testing.T, data []byte) {
	req := new(rlsv3.RateLimitRequest)
	if !s.decode(data, req) {
		return
	}
	resp, err := s.rls.ShouldRateLimit(context.Background(), req)
	if envoyShaped(req) {
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("ShouldRateLimit of a request Envoy shaped wrong: %v, %v; want InvalidArgument\n%v", resp, err, req)
		}
		return
	}
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v\n%v", err, req)
	}
	over := false
	for _, st := range resp.GetStatuses() {
		switch st.GetCode() {
		case rlsv3.RateLimitResponse_OK:
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			over = true
		default:
			t.Fatalf("descriptor status %v\n%v", st, req)
		}
	}
	want := rlsv3.RateLimitResponse_OK
	if over {
		want = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if len(resp.GetStatuses()) != len(req.Descriptors) || resp.GetOverallCode() != want {
		t.Fatalf("%d descriptors: %d statuses, overall %v (want %v)\n%v", len(req.Descriptors), len(resp.GetStatuses()), resp.GetOverallCode(), want, req)
	}
	s.marshals(t, resp)
}

func (s *fuzzServer) check(t *testing.T, data []byte) {
	req := new(authv3.CheckRequest)
	if !s.decode(data, req) {
		return
	}
	resp, err := s.authz.Check(context.Background(), req)
	// The domain comes from Envoy's ExtAuthzPerRoute; every value the
	// front door builds from the request is the client's.
	if domain := req.GetAttributes().GetContextExtensions()[frontdoor.ContextExtensionDomain]; domain != "" && domain != fuzzDomain {
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Check naming domain %q: %v, %v; want InvalidArgument", domain, resp, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Check: %v\n%v", err, req)
	}
	switch code := codes.Code(resp.GetStatus().GetCode()); {
	case code == codes.OK && resp.GetOkResponse() != nil:
	case code == codes.PermissionDenied && resp.GetDeniedResponse() != nil:
	default:
		t.Fatalf("Check answered %v\n%v", resp, req)
	}
	s.marshals(t, resp)
}
