package blackbox

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/test/tgproc"
)

// utf8Policy gives each user 2 requests, by descriptor or, through
// ext_authz, by x-user-id; nothing refills within a test.
const utf8Policy = `revision: 1
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 2
      refill: 1/h
front_doors:
  ext_authz:
    domains:
      edge:
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
`

// pb builds protobuf wire data by hand: proto.Marshal refuses strings that
// are not UTF-8, and Envoy sends header bytes as they came.
type pb []byte

func (w pb) str(num protowire.Number, s string) pb {
	return protowire.AppendString(protowire.AppendTag(w, num, protowire.BytesType), s)
}

func (w pb) msg(num protowire.Number, sub pb) pb {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), sub)
}

// rlsRequest is a RateLimitRequest of domain edge (domain = 1) with one
// descriptor (descriptors = 2) of one entry (entries = 1; key = 1,
// value = 2).
func rlsRequest(key, value string) pb {
	return pb{}.str(1, "edge").msg(2, pb{}.msg(1, pb{}.str(1, key).str(2, value)))
}

// checkRequest is a CheckRequest (attributes = 1) of a GET / with one
// header: AttributeContext.request = 4, Request.http = 2,
// HttpRequest.method = 2, headers = 3 (key = 1, value = 2), path = 4.
func checkRequest(header, value string) pb {
	http := pb{}.str(2, "GET").msg(3, pb{}.str(1, header).str(2, value)).str(4, "/")
	return pb{}.msg(1, pb{}.msg(4, pb{}.msg(2, http)))
}

// rawBytes is a client codec that sends *pb as it is and receives into
// *[]byte.
type rawBytes struct{}

func (rawBytes) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*pb))}, nil
}

func (rawBytes) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawBytes) Name() string { return "proto" }

// invokeRaw calls method on p with the wire data req and decodes the
// answer into resp, failing the test on an error.
func invokeRaw(t *testing.T, p *tgproc.Proc, method string, req pb, resp proto.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []byte
	if err := p.Conn.Invoke(ctx, method, &req, &out, grpc.ForceCodecV2(rawBytes{})); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if err := proto.Unmarshal(out, resp); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidUTF8 (the built binary): a descriptor value or an ext_authz
// header that is not UTF-8 is no free pass. Each byte string is its own
// bucket, denied after its 2 requests; /metrics counts the requests by
// method.
func TestInvalidUTF8(t *testing.T) {
	p, _ := startWithPolicy(t, utf8Policy)
	const capacity = 2
	t.Run("ShouldRateLimit", func(t *testing.T) {
		for _, v := range []string{"\xff", "\xfe"} {
			for i := range capacity + 1 {
				var resp rlsv3.RateLimitResponse
				invokeRaw(t, p, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", rlsRequest("user_id", v), &resp)
				if want := map[bool]rlsv3.RateLimitResponse_Code{true: ok, false: over}[i < capacity]; resp.OverallCode != want {
					t.Fatalf("value %q, request %d: %v, want %v", v, i+1, resp.OverallCode, want)
				}
			}
		}
	})
	t.Run("ext_authz Check", func(t *testing.T) {
		for _, v := range []string{"\xfd", "\x80\x80"} {
			for i := range capacity + 1 {
				var resp authv3.CheckResponse
				invokeRaw(t, p, "/envoy.service.auth.v3.Authorization/Check", checkRequest("x-user-id", v), &resp)
				if allowed := codes.Code(resp.GetStatus().GetCode()) == codes.OK; allowed != (i < capacity) {
					t.Fatalf("x-user-id %q, request %d: allowed %v, want %v", v, i+1, allowed, i < capacity)
				}
			}
		}
	})
	for method, want := range map[string]string{"ratelimit": "6", "ext_authz": "6"} {
		if got := p.Metric(t, `tokengate_requests_invalid_utf8_total{method="`+method+`"}`); got != want {
			t.Errorf("tokengate_requests_invalid_utf8_total{method=%q} = %q, want %s", method, got, want)
		}
	}
}
