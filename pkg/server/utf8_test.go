package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/wiretest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/frontdoor"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// stack is the policy, service and front doors of a test, wired as
// cmd/tokengate wires them, on a fake clock.
type stack struct {
	policy func() *policy.Policy
	svc    *service.Service
	doors  *frontdoor.Doors
	reg    *prometheus.Registry
	m      *metrics.Metrics
	log    *slog.Logger
}

// newStack compiles yaml and decides it from st (a memory store on the
// fake clock when st is nil).
func newStack(t testing.TB, yaml string, st store.Store) *stack {
	t.Helper()
	clk := new(clock.Fake)
	p, err := new(policy.Compiler).Compile("policy.yaml", []byte(yaml), nil, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Activate()
	if st == nil {
		st = memory.New(memory.Options{Clock: clk})
	}
	s := &stack{policy: func() *policy.Policy { return p }, reg: prometheus.NewRegistry(), log: slog.New(slog.DiscardHandler)}
	s.m = metrics.New(s.reg)
	if s.svc, err = service.New(service.Options{Policy: s.policy, Store: st, StoreName: "memory", Metrics: s.m, Clock: clk, Logger: s.log}); err != nil {
		t.Fatal(err)
	}
	if s.doors, err = frontdoor.New(frontdoor.Options{Service: s.svc, Policy: s.policy, Metrics: metrics.NewFrontDoors(s.reg), Logger: s.log}); err != nil {
		t.Fatal(err)
	}
	return s
}

// startServer serves the policy from a memory store, with the ratelimit and
// ext_authz front doors, on loopback ports until the test ends.
func startServer(t *testing.T, yaml string) (*Server, *metrics.Metrics) {
	t.Helper()
	s := newStack(t, yaml, nil)
	return serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Authorization: s.doors.ExtAuthz(),
		Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log}), s.m
}

// serve runs a server of opts on loopback ports until the test ends.
func serve(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// rawClient sends wire data it was given as a gRPC request, as Envoy would
// send a request holding a header's bytes.
type rawClient struct{ conn *grpc.ClientConn }

func dialRaw(t *testing.T, addr string) rawClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rawClient{conn}
}

// call invokes method with req and decodes the answer into resp.
func (c rawClient) call(method string, req wire, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return wiretest.Invoke(ctx, c.conn, method, req, resp)
}

func (c rawClient) shouldRateLimit(t *testing.T, req wire) rlsv3.RateLimitResponse_Code {
	t.Helper()
	var resp rlsv3.RateLimitResponse
	if err := c.call(wiretest.ShouldRateLimit, req, &resp); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode
}

// check calls ext_authz Check and reports whether it allowed the request.
func (c rawClient) check(t *testing.T, req wire) bool {
	t.Helper()
	var resp authv3.CheckResponse
	if err := c.call(wiretest.Check, req, &resp); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return codes.Code(resp.GetStatus().GetCode()) == codes.OK
}

// TestInvalidUTF8IsLimited: over a real gRPC connection, a descriptor value
// or an ext_authz header that is not UTF-8 is limited like any other: the
// (capacity+1)th request with it is denied, and other bytes are another
// bucket. Such requests are counted by method; valid ones are not;
// malformed wire data is still refused.
func TestInvalidUTF8IsLimited(t *testing.T) {
	srv, m := startServer(t, wiretest.UserPolicy)
	c := dialRaw(t, srv.GRPCAddr().String())
	counted := func(method string) int { return int(testutil.ToFloat64(m.InvalidUTF8.WithLabelValues(method))) }

	t.Run("ratelimit", func(t *testing.T) {
		for _, v := range []string{"\xff", "\xfe", "a\xff"} {
			for i := range wiretest.UserCapacity + 1 {
				want := rlsv3.RateLimitResponse_OK
				if i == wiretest.UserCapacity {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if got := c.shouldRateLimit(t, wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", v))); got != want {
					t.Fatalf("value %q, request %d: %v, want %v", v, i+1, got, want)
				}
			}
		}
		if n := counted(metrics.FrontDoorRateLimit); n != 3*(wiretest.UserCapacity+1) {
			t.Fatalf("counted %d ratelimit requests, want %d", n, 3*(wiretest.UserCapacity+1))
		}
	})
	t.Run("ext_authz", func(t *testing.T) {
		before := counted(metrics.FrontDoorExtAuthz)
		for _, v := range []string{"\xfd", "\xfc\x80"} {
			for i := range wiretest.UserCapacity + 1 {
				req := wiretest.CheckRequest("10.0.0.1", "", "/", "x-user-id", v)
				if got, want := c.check(t, req), i < wiretest.UserCapacity; got != want {
					t.Fatalf("x-user-id %q, request %d: allowed %v, want %v", v, i+1, got, want)
				}
			}
		}
		// The same bytes through ext_authz are the bucket ShouldRateLimit
		// used up.
		if c.check(t, wiretest.CheckRequest("10.0.0.1", "", "/", "x-user-id", "\xff")) {
			t.Fatal(`x-user-id "\xff" allowed: its bucket is empty`)
		}
		if n := counted(metrics.FrontDoorExtAuthz) - before; n != 2*(wiretest.UserCapacity+1)+1 {
			t.Fatalf("counted %d ext_authz requests, want %d", n, 2*(wiretest.UserCapacity+1)+1)
		}
	})
	t.Run("valid requests are not counted", func(t *testing.T) {
		before := counted(metrics.FrontDoorRateLimit)
		if got := c.shouldRateLimit(t, wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "alice"))); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("alice: %v", got)
		}
		if n := counted(metrics.FrontDoorRateLimit) - before; n != 0 {
			t.Fatalf("a valid request counted %d times", n)
		}
	})
	t.Run("malformed wire data is refused", func(t *testing.T) {
		req := wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "\xff"))
		var resp rlsv3.RateLimitResponse
		err := c.call(wiretest.ShouldRateLimit, req[:len(req)-1], &resp)
		if status.Code(err) != codes.Internal {
			t.Fatalf("truncated request: %v, want Internal", err)
		}
	})
}
