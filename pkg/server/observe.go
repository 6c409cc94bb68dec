package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// observe records every unary RPC's latency by method and code. The
// observers of successful calls are looked up once (okObservers), so the
// common case does no label hashing.
func (s *Server) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	elapsed := time.Since(start).Seconds()
	if o, ok := s.okObservers[info.FullMethod]; ok && err == nil {
		o.Observe(elapsed)
	} else {
		s.opts.Metrics.RPCDuration.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(elapsed)
	}
	return resp, err
}

// buildOKObservers returns the latency observer of code OK for every method the
// gRPC server serves.
func (s *Server) buildOKObservers() map[string]prometheus.Observer {
	obs := map[string]prometheus.Observer{}
	for svc, info := range s.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			obs[full] = s.opts.Metrics.RPCDuration.WithLabelValues(full, codes.OK.String())
		}
	}
	return obs
}
