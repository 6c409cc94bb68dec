package blackbox

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/internal/wiretest"
)

// invokeRaw calls method on p with the wire data req and decodes the
// answer into resp, failing the test on an error.
func invokeRaw(t *testing.T, p *tgproc.Proc, method string, req wiretest.Wire, resp proto.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wiretest.Invoke(ctx, p.Conn, method, req, resp); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// TestInvalidUTF8 (the built binary): a descriptor value or an ext_authz
// header that is not UTF-8 is no free pass. Each byte string is its own
// bucket, denied after its 2 requests; /metrics counts the requests by
// method.
func TestInvalidUTF8(t *testing.T) {
	p, _ := startWithPolicy(t, wiretest.UserPolicy)
	const capacity = 2
	t.Run("ShouldRateLimit", func(t *testing.T) {
		for _, v := range []string{"\xff", "\xfe"} {
			for i := range capacity + 1 {
				var resp rlsv3.RateLimitResponse
				invokeRaw(t, p, wiretest.ShouldRateLimit, wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", v)), &resp)
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
				invokeRaw(t, p, wiretest.Check, wiretest.CheckRequest("10.0.0.1", "", "/", "x-user-id", v), &resp)
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
