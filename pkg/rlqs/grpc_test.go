package rlqs

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/internal/poll"
)

// TestTwoEnvoysOverGRPC: two emulated Envoys on go-control-plane's
// generated RLQS client, over real gRPC on 127.0.0.1, against a service
// on a fake clock, so that 30 s of their traffic runs in well under a
// second of real time: each step moves the clock 10 ms, and a report
// waits until every action the service counted as sent has arrived, so
// responses arrive at the instant they are sent (no delay). Together they
// allow at most capacity + rate*t, and, asking for four times the rate,
// most of it.
func TestTwoEnvoysOverGRPC(t *testing.T) {
	const capacity, perSecond = 200, 50
	f := newFixture(t, "domains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: 200\n      refill: 50/s\n", Options{})
	srv, cc := serveGRPC(t, f.svc)
	defer srv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var received, messages atomic.Int64
	sent := func() int64 {
		var n float64
		for _, a := range []string{actionTokenBucket, actionAllowAll, actionDenyAll, actionAbandon} {
			n += testutil.ToFloat64(f.svc.m.actions.WithLabelValues("edge", "per-user", a))
		}
		return int64(n)
	}
	start := f.clk.Now()
	envoys := make([]*envoy, 2)
	inboxes := make([]chan *rlqsv3.RateLimitQuotaResponse, 2)
	for i := range envoys {
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inbox := make(chan *rlqsv3.RateLimitQuotaResponse, 64)
		go func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					close(inbox)
					return
				}
				inbox <- r
				received.Add(int64(len(r.GetBucketAction())))
			}
		}()
		envoys[i] = newEnvoy("edge", time.Second, start+int64(i)*int64(330*time.Millisecond), func(msg *rlqsv3.RateLimitQuotaUsageReports) []*rlqsv3.RateLimitQuotaResponse {
			if err := stream.Send(msg); err != nil {
				t.Fatal(err)
			}
			// The message is answered, and every action sent has
			// arrived (the answer, and what it made the service push
			// to the other stream).
			n := messages.Add(1)
			poll.Eventually(t, 10*time.Second, func() bool {
				return int64(testutil.ToFloat64(f.svc.m.messages)) == n && received.Load() >= sent()
			}, "the service's answer to arrive")
			return drain(inbox)
		})
		inboxes[i] = inbox
	}
	user := map[string]string{"user": "alice"}
	var allowed int64
	for step := 1; step <= 3000; step++ {
		now := f.clk.Add(10 * time.Millisecond)
		for i, e := range envoys {
			// What the other's report made the service push to it has
			// arrived already.
			for _, r := range drain(inboxes[i]) {
				e.receive(now, r)
			}
			e.tick(now)
			if e.request(now, user) {
				allowed++
			}
		}
		if limit := capacity + perSecond*(now-start)/int64(time.Second); allowed > limit {
			t.Fatalf("at %v the two Envoys allowed %d, more than capacity + rate*t = %d", time.Duration(now-start), allowed, limit)
		}
	}
	bound := int64(capacity + perSecond*30)
	if allowed*10 < bound*7 {
		t.Fatalf("allowed %d of %d: under 70%% with four times the rate asked", allowed, bound)
	}
	t.Logf("30 s simulated: allowed %d, capacity + rate*t = %d", allowed, bound)
}

// drain is what the inbox holds now.
func drain(inbox chan *rlqsv3.RateLimitQuotaResponse) []*rlqsv3.RateLimitQuotaResponse {
	var got []*rlqsv3.RateLimitQuotaResponse
	for {
		select {
		case r, ok := <-inbox:
			if !ok {
				return got
			}
			got = append(got, r)
		default:
			return got
		}
	}
}

// TestStreamsEndWithRun: once Run's context ends (shutdown), every open
// stream ends with Unavailable, so that a graceful stop does not wait for
// streams Envoy never closes.
func TestStreamsEndWithRun(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	srv, cc := serveGRPC(t, f.svc)
	run, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { f.svc.Run(run, time.Hour); close(ran) }()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(report("edge", map[string]string{"ip": "1.2.3.4"}, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stop()
	<-ran
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("after shutdown: %v", err)
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop waits for RLQS streams")
	}
}

// serveGRPC serves svc over gRPC on 127.0.0.1 and returns the server and
// a client connection to it, closed when the test ends.
func serveGRPC(t *testing.T, svc *Service) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, svc)
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, cc
}
