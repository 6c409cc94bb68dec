package main

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/server"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// receiver is an in-process OTLP trace receiver: the collector's gRPC
// trace service, keeping every span it is sent with its resource.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs map[string]string // of the resources
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			r.attrs[a.Key] = a.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{attrs: map[string]string{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return r, l.Addr().String()
}

// TestTracingOTLP: with --otlp-endpoint, a ShouldRateLimit that carries a
// W3C traceparent in its gRPC metadata (as Envoy sends it) is one span,
// exported over OTLP gRPC, in the caller's trace and under its span, with
// the decision's domain, rules, result and store timing.
func TestTracingOTLP(t *testing.T) {
	recv, addr := startReceiver(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := startTracing(ctx, "http://"+addr, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("p.yaml", []byte("domains:\n  edge:\n    - {name: per-user, match: [{key: user_id}], capacity: 1, refill: 1/h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	current := func() *policy.Policy { return pol }
	clk := clock.NewMonotonic()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	log := slog.New(slog.DiscardHandler)
	svc, err := service.New(service.Options{Policy: current, Store: memory.New(memory.Options{Clock: clk}), StoreName: "memory",
		Metrics: m, Clock: clk, Logger: log, Tracer: tr.tracer})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", RateLimit: svc, Metrics: m, Gatherer: reg,
		Policy: current, Logger: log, Propagator: tr.propagator})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	call := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "quinn"}}}}}
	for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(call, req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit: %v %v, want %v", resp, err, want)
		}
	}
	if err := tr.shutdown(context.Background()); err != nil { // flushes the batch
		t.Fatal(err)
	}
	cancel()
	<-served

	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(recv.spans))
	}
	if got := recv.attrs["service.name"]; got != "tokengate" || recv.attrs["service.version"] != "v-test" {
		t.Errorf("resource %v", recv.attrs)
	}
	for i, wantCode := range []string{"OK", "OVER_LIMIT"} {
		sp := recv.spans[i]
		if sp.Name != service.SpanName || hex.EncodeToString(sp.TraceId) != traceID || hex.EncodeToString(sp.ParentSpanId) != parentID ||
			sp.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Fatalf("span %d: %s trace %x parent %x kind %v", i, sp.Name, sp.TraceId, sp.ParentSpanId, sp.Kind)
		}
		attrs := map[string]string{}
		for _, a := range sp.Attributes {
			switch v := a.Value; {
			case v.GetArrayValue() != nil:
				attrs[a.Key] = v.GetArrayValue().Values[0].GetStringValue()
			case a.Key == service.AttrStoreDuration:
				if v.GetIntValue() <= 0 {
					t.Errorf("span %d: store duration %v", i, v)
				}
				attrs[a.Key] = "timed"
			default:
				attrs[a.Key] = v.GetStringValue()
			}
		}
		for k, w := range map[string]string{service.AttrDomain: "edge", service.AttrRules: "per-user", service.AttrCode: wantCode,
			service.AttrStore: "memory", service.AttrStoreDuration: "timed"} {
			if attrs[k] != w {
				t.Errorf("span %d: %s = %q, want %q", i, k, attrs[k], w)
			}
		}
	}
}

// TestTracingOff: with no endpoint and no OTEL_EXPORTER_OTLP_* variable
// there is no tracer and no propagator, so nothing is traced or read.
func TestTracingOff(t *testing.T) {
	for _, env := range otlpEndpointEnv {
		t.Setenv(env, "")
	}
	tr, err := startTracing(context.Background(), "", "v")
	if err != nil || tr.tracer != nil || tr.propagator != nil || tr.shutdown(context.Background()) != nil {
		t.Fatalf("tracing off: %+v %v", tr, err)
	}
	if err := checkOTLPEndpoint("collector:4317"); err == nil {
		t.Fatal("an endpoint without a scheme was taken")
	}
}
