package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tokengate/tokengate/internal/logtest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/rlqs"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// quotaStream is one RLQS stream of a single report, without gRPC.
type quotaStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*rlqsv3.RateLimitQuotaUsageReports
	sent []*rlqsv3.RateLimitQuotaResponse
}

func (q *quotaStream) Context() context.Context { return q.ctx }

func (q *quotaStream) Recv() (*rlqsv3.RateLimitQuotaUsageReports, error) {
	if len(q.msgs) == 0 {
		return nil, io.EOF
	}
	m := q.msgs[0]
	q.msgs = q.msgs[1:]
	return m, nil
}

func (q *quotaStream) Send(r *rlqsv3.RateLimitQuotaResponse) error {
	q.sent = append(q.sent, r)
	return nil
}

// TestRLQSDecisionLog: serve's RLQS service writes its assignments to the
// decision log, naming the bucket with serve's key, unless
// --decision-log-rate 0 turns the log off.
func TestRLQSDecisionLog(t *testing.T) {
	clk := new(clock.Fake)
	clk.Set(int64(time.Hour))
	var comp policy.Compiler
	pol, err := comp.Compile("policy.yaml", []byte("domains:\n  edge:\n    - {name: per-user, match: [{key: user}], capacity: 10, refill: 10/s}\n"), nil, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	keys := keyhash.Random()
	entries := []policy.Entry{{Key: "user", Value: "alice"}}
	wantKey := keys.Hash(pol.Rule("edge", "per-user").AppendKey(nil, entries))
	for _, rate := range []int{100, 0} {
		rec := &logtest.Recorder{Level: slog.LevelDebug}
		s := settings{Store: "memory", DecisionLogRate: rate, RLQS: rlqsSettings{ReportingInterval: time.Second, MaxStreams: 1, MaxBucketsPerStream: 1}}
		ctx, cancel := context.WithCancel(context.Background())
		svc, err := startRLQS(ctx, s, func() *policy.Policy { return pol }, memory.New(memory.Options{Clock: clk}), prometheus.NewRegistry(), clk, rec.Logger(), keys)
		if err != nil {
			t.Fatal(err)
		}
		q := &quotaStream{ctx: ctx, msgs: []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice"}}, NumRequestsDenied: 1},
		}}}}
		err = svc.StreamRateLimitQuotas(q)
		cancel()
		if err != nil || len(q.sent) != 1 {
			t.Fatalf("rate %d: stream ended with %v after %d responses", rate, err, len(q.sent))
		}
		var lines []logtest.Record
		for _, r := range rec.Records() {
			if r.Message == rlqs.MsgAssigned {
				lines = append(lines, r)
			}
		}
		switch {
		case rate == 0 && len(lines) != 0:
			t.Fatalf("--decision-log-rate 0: lines %v", lines)
		case rate > 0 && (len(lines) != 1 || lines[0].Attrs["key"] != wantKey):
			t.Fatalf("lines %v, want one %q of key %s", lines, rlqs.MsgAssigned, wantKey)
		}
	}
}
