package blackbox

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/internal/tgproc"
)

const rlqsPolicy = `domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 100
      refill: 10/s
`

// TestRLQS: the binary serves Envoy's rate_limit_quota stream on its gRPC
// port: a report of a bucket is answered with a token bucket of the
// rule's rate, leased from the bucket ShouldRateLimit decides on, and a
// new policy (the file rewritten) reaches the open stream by itself; at
// shutdown tokengate ends the stream.
func TestRLQS(t *testing.T) {
	p, path := startWithPolicy(t, rlqsPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), tgproc.Timeout)
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(p.Conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"user_id": "alice"}}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, NumRequestsDenied: 1}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if tb := qa.GetRateLimitStrategy().GetTokenBucket(); tb.GetTokensPerFill().GetValue() != 10 || tb.GetFillInterval().AsDuration() != time.Second || qa.GetAssignmentTimeToLive().AsDuration() != 2*time.Second {
		t.Fatalf("assignment %v", resp)
	}
	// The lease (10 of burst, 10/s for 2.25 s) came out of the bucket
	// ShouldRateLimit decides on: at most 100-33, with what refilled since.
	if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice")); r.OverallCode != ok || r.Statuses[0].LimitRemaining > 100-33 {
		t.Fatalf("ShouldRateLimit after the lease: %v", r)
	}
	tgproc.WritePolicy(t, path, strings.Replace(rlqsPolicy, "capacity: 100\n      refill: 10/s", "capacity: 0", 1))
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy(); r.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL || r.GetTokenBucket() != nil {
		t.Fatalf("after the reload to capacity 0: %v", resp)
	}
	p.WantMetrics(t, map[string]string{
		"tokengate_rlqs_streams": "1",
		`tokengate_rlqs_assignments_total{action="deny_all",domain="edge",rule="per-user"}`: "1",
	})
	// On SIGTERM the stream is ended by tokengate, not cut by the end of
	// the drain.
	if err := p.Stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "tokengate is shutting down") {
		t.Fatalf("the stream at shutdown: %v", err)
	}
}
