package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestExtractTrace: with a propagator, the trace context a caller sends
// in gRPC metadata, or in a forward-auth request's headers, is the
// handler's remote parent.
func TestExtractTrace(t *testing.T) {
	s := &Server{opts: Options{Propagator: propagation.TraceContext{}}}
	check := func(ctx context.Context) {
		t.Helper()
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
			t.Fatalf("span context %+v", sc)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", traceparent))
	called := false
	if _, err := s.extractTrace(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		check(ctx)
		called = true
		return nil, nil
	}); err != nil || !called {
		t.Fatal(err, called)
	}
	r := httptest.NewRequest("GET", "/v1/check", nil)
	r.Header.Set("Traceparent", traceparent)
	s.extractTraceHTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { check(r.Context()) })).ServeHTTP(httptest.NewRecorder(), r)
}
