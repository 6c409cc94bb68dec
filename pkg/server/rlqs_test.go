package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/rlqs"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// TestRLQSOnTheGRPCPort: the RLQS service is served beside ratelimit.v3,
// through the server's codec, on the same buckets: the lease an RLQS
// stream is assigned is what ShouldRateLimit then finds gone; and
// /debug/rlqs shows it.
func TestRLQSOnTheGRPCPort(t *testing.T) {
	st := memory.New(memory.Options{Clock: new(clock.Fake)})
	s := newStack(t, "domains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: 100\n      refill: 10/s\n", st)
	quotas, err := rlqs.New(rlqs.Options{Policy: s.policy, Store: st, Registerer: s.reg, Clock: new(clock.Fake)})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), RateLimitQuota: quotas, RateLimitQuotaView: quotas.Handler(), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log})
	cc, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice"}}, NumRequestsDenied: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb.GetTokensPerFill().GetValue() != 10 {
		t.Fatalf("assignment %v", resp)
	}
	// 10 of burst and 10/s paid 2.25 s ahead: 33 of the 100 are gone.
	rl, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}})
	if err != nil || rl.GetStatuses()[0].GetLimitRemaining() != 100-33-1 {
		t.Fatalf("ShouldRateLimit after the lease: %v, %v (want %d left)", rl, err, 100-33-1)
	}
	res, err := http.Get("http://" + srv.HTTPAddr().String() + "/debug/rlqs")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v rlqs.View
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || v.Streams != 1 || len(v.Rules) != 1 || v.Rules[0].Leased != 10 {
		t.Fatalf("/debug/rlqs: %+v, %v", v, err)
	}
}
