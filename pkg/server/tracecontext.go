package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// With Options.Propagator, every unary RPC's context carries the trace
// context its caller sent (Envoy sends W3C traceparent in the gRPC
// metadata of its ratelimit and ext_authz calls when it traces), and so
// does every forward-auth request's (its HTTP headers): the service's
// span of the decision is its child. Without it nothing is read.

// extractTrace is the unary interceptor that reads the trace context.
func (s *Server) extractTrace(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = s.opts.Propagator.Extract(ctx, metadataCarrier(md))
	}
	return handler(ctx, req)
}

// extractTraceHTTP wraps an HTTP handler to read the trace context.
func (s *Server) extractTraceHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := s.opts.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// metadataCarrier reads gRPC metadata (lower-case keys) as a
// propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
