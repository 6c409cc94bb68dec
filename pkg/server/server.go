// Package server runs tokengate's listeners: gRPC (the ratelimit.v3
// service, when given the ext_authz Authorization service and the RLQS
// RateLimitQuotaService,
// grpc.health.v1 and server reflection) and HTTP (/metrics, /healthz,
// /readyz, /debug/policy, envoyproxy/ratelimit's /healthcheck and /json,
// when given a candidate policy /debug/candidate, when given RLQS
// /debug/rlqs, when given forward-auth
// /v1/check and, when asked, /debug/pprof/), and when asked a debug
// listener (/rlconfig, pprof) and a metrics listener (sidelisteners.go).
// Serve runs until its context ends, then drains: health turns
// NOT_SERVING, new connections are refused, in-flight RPCs finish within
// ShutdownTimeout.
// Readiness is "can answer": a failing store is reported apart, by the
// health service StoreHealthService (health.go).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

// Options configure a Server. RateLimit, Metrics, Gatherer and Policy are
// required.
type Options struct {
	GRPCAddr string // [":8081"]
	HTTPAddr string // [":8080"]

	RateLimit rlsv3.RateLimitServiceServer
	// Authorization, when set, serves envoy.service.auth.v3.Authorization
	// (Envoy's ext_authz) on the gRPC port too.
	Authorization authv3.AuthorizationServer
	// RateLimitQuota, when set, serves
	// envoy.service.rate_limit_quota.v3.RateLimitQuotaService (Envoy's
	// rate_limit_quota filter, pkg/rlqs) on the gRPC port too.
	RateLimitQuota rlqsv3.RateLimitQuotaServiceServer
	// RateLimitQuotaView, when set, serves /debug/rlqs: the assignments
	// held now (rlqs.Service.Handler).
	RateLimitQuotaView http.Handler
	// ForwardAuth, when set, serves HTTP forward-auth at /v1/check (any
	// method) on the HTTP port.
	ForwardAuth http.Handler
	Metrics     *metrics.Metrics
	Gatherer    prometheus.Gatherer // what /metrics serves
	// Policy returns the policy now serving, for /debug/policy.
	Policy func() *policy.Policy
	// Candidate, when set, serves /debug/candidate: the candidate policy
	// decided beside the live one (candidate.Tracker.Handler).
	Candidate http.Handler
	// Store reports why the store cannot decide now (nil when it can); nil
	// is a store that always can (memory). Checked every second, it backs
	// the gRPC health service StoreHealthService and
	// tokengate_store_degraded (health.go).
	Store func() error
	// ReadyRequiresStore makes readiness (/readyz and the gRPC health of
	// "" and of every service served) follow Store as well, so that a lost
	// store takes the replica out. Without it tokengate is ready while it
	// can answer, each rule's on_store_error answering for a failing store.
	ReadyRequiresStore bool
	// Ready, when set, reports why tokengate cannot answer yet (nil when
	// it can): a policy source that has not delivered its first policy
	// (xDS), a store that has not answered once since the start (Redis
	// misspelt, refusing the credentials). Readiness follows it as well.
	Ready func() error
	// TLS, when set, serves gRPC over TLS only (plaintext is refused);
	// for mTLS it verifies clients (tlsfiles.Files.ServerConfig).
	TLS *tls.Config

	// DebugAddr, when set, is a listener for /rlconfig and /debug/pprof/
	// (sidelisteners.go).
	DebugAddr string
	// MetricsListener, when set, serves the metrics alone on a listener of
	// its own, as well as on the HTTP address (sidelisteners.go).
	MetricsListener *MetricsListener

	Pprof           bool          // serve /debug/pprof/
	ShutdownTimeout time.Duration // longest drain of in-flight RPCs [10s]
	Logger          *slog.Logger  // [slog.Default()]
	Clock           clock.Clock   // [monotonic clock]; times the budgets of per-request logs

	// HTTP bounds the HTTP listener's connections (http.go).
	HTTP HTTPLimits
	// GRPCMaxRecvBytes is the largest request message accepted on the gRPC
	// port, and body on /json; larger ones are refused before they are
	// read [1 MiB] (decodebounds.go).
	GRPCMaxRecvBytes int
	// GRPCMaxConnectionIdle is how long a gRPC connection may go without an
	// RPC before the server closes it gracefully (GOAWAY) [5m].
	GRPCMaxConnectionIdle time.Duration
	// Propagator, when set, reads the trace context a caller sends (gRPC
	// metadata, forward-auth headers) into each request's context
	// (tracecontext.go); nil reads none.
	Propagator propagation.TextMapPropagator
}

// Server holds the two listeners.
type Server struct {
	opts   Options
	grpc   *grpc.Server
	health *health.Server
	http   *http.Server
	gl, hl net.Listener
	// okObservers is built once all services are registered; read-only.
	okObservers map[string]prometheus.Observer
	// degraded is why the store failed at the latest health check, nil
	// while it decides (health.go).
	degraded atomic.Pointer[string]
	// side are the debug and metrics listeners (sidelisteners.go).
	side []sideServer
	// decodes bounds the large requests decoding at once (decodegate.go).
	decodes *decodeGate
	// draining is set when shutdown starts: /healthcheck fails from then.
	draining atomic.Bool
}

// gRPC limits, set deliberately: ratelimit requests are small, and Envoy
// keeps long-lived HTTP/2 connections with its own keepalives. Streams are
// served by a pool of streamWorkers goroutines that live on, and messages
// are encoded as codec.go says (ratelimit requests and responses by hand,
// other responses by vtprotobuf when built with its tag). A
// stream that finds every worker busy gets a goroutine of its own (gRPC's
// fallback), whose stack then grows by copying: with a pool of GOMAXPROCS
// workers, 64 requests in flight spent 13% of the server's CPU (8
// descriptors, memory store) and 5% (one descriptor, Redis) in
// runtime.copystack; with 128, under 1%. An idle worker holds only its
// stack.
//
// Keepalive: the server pings a connection quiet for keepaliveTime and
// closes it when the ping is not answered within keepaliveTimeout (a peer
// gone without a FIN); a client may ping at most every keepaliveMinTime,
// even with no RPC open, or is sent away (GOAWAY too_many_pings). A
// connection with no RPC for GRPCMaxConnectionIdle is closed by a graceful
// GOAWAY, which Envoy answers by connecting again on its next request, so
// idle connections do not pile up. No MaxConnectionAge: it would close
// Envoy's busy long-lived connections for nothing.
const (
	maxConcurrentStreams         = 4096
	streamWorkers                = 128
	keepaliveTime                = 30 * time.Second
	keepaliveTimeout             = 10 * time.Second
	keepaliveMinTime             = 5 * time.Second
	defaultGRPCMaxConnectionIdle = 5 * time.Minute
)

// New listens on both addresses (":0" picks free ports; see GRPCAddr and
// HTTPAddr) but serves nothing until Serve.
func New(opts Options) (*Server, error) {
	if opts.RateLimit == nil || opts.Metrics == nil || opts.Gatherer == nil || opts.Policy == nil {
		return nil, errors.New("server: RateLimit, Metrics, Gatherer and Policy are required")
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr = ":8081"
	}
	if opts.HTTPAddr == "" {
		opts.HTTPAddr = ":8080"
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	if opts.GRPCMaxRecvBytes <= 0 {
		opts.GRPCMaxRecvBytes = defaultMaxRecvBytes
	}
	if opts.GRPCMaxConnectionIdle <= 0 {
		opts.GRPCMaxConnectionIdle = defaultGRPCMaxConnectionIdle
	}
	s := &Server{opts: opts, health: health.NewServer(), decodes: newDecodeGate()}
	var err error
	if s.gl, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
		return nil, fmt.Errorf("server: gRPC listener: %w", err)
	}
	if s.hl, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
		s.gl.Close()
		return nil, fmt.Errorf("server: HTTP listener: %w", err)
	}
	if err := s.listenSides(); err != nil {
		s.gl.Close()
		s.hl.Close()
		s.closeSides()
		return nil, err
	}
	var creds []grpc.ServerOption
	if opts.TLS != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(append(creds,
		grpc.ForceServerCodecV2(newCodec(opts.Metrics.InvalidUTF8, opts.Logger, opts.Clock, s.decodes)),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxRecvMsgSize(opts.GRPCMaxRecvBytes),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: keepaliveTime, Timeout: keepaliveTimeout, MaxConnectionIdle: opts.GRPCMaxConnectionIdle,
		}),
		grpc.ChainUnaryInterceptor(s.interceptors()...),
	)...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, opts.RateLimit)
	if opts.Authorization != nil {
		authv3.RegisterAuthorizationServer(s.grpc, opts.Authorization)
	}
	if opts.RateLimitQuota != nil {
		rlqsv3.RegisterRateLimitQuotaServiceServer(s.grpc, opts.RateLimitQuota)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.okObservers = s.buildOKObservers()
	s.http = s.newHTTP(s.routes())
	return s, nil
}

// interceptors are the unary interceptors, in order: latency, then the
// trace context when there is a propagator.
func (s *Server) interceptors() []grpc.UnaryServerInterceptor {
	is := []grpc.UnaryServerInterceptor{s.observe}
	if s.opts.Propagator != nil {
		is = append(is, s.extractTrace)
	}
	return is
}

// GRPCAddr is the address the gRPC listener is bound to.
func (s *Server) GRPCAddr() net.Addr { return s.gl.Addr() }

// HTTPAddr is the address the HTTP listener is bound to.
func (s *Server) HTTPAddr() net.Addr { return s.hl.Addr() }

// Serve serves until ctx ends, then shuts down gracefully. It returns nil
// after a clean shutdown.
func (s *Server) Serve(ctx context.Context) error {
	errs := make(chan error, 2+len(s.side))
	for _, sd := range s.side {
		go func() {
			if err := sd.srv.Serve(sd.l); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("server: %s listener: %w", sd.name, err)
			}
		}()
	}
	go func() { errs <- s.grpc.Serve(s.gl) }()
	go func() {
		if err := s.http.Serve(s.hl); !errors.Is(err, http.ErrServerClosed) {
			errs <- err
			return
		}
		errs <- nil
	}()
	stopHealth := s.trackHealth(ctx)
	attrs := []any{slog.String("grpc", s.GRPCAddr().String()), slog.String("http", s.HTTPAddr().String())}
	for _, sd := range s.side {
		attrs = append(attrs, slog.String(sd.name, sd.l.Addr().String()))
	}
	s.opts.Logger.Info("serving", attrs...)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	stopHealth()
	return errors.Join(err, s.shutdown())
}

// shutdown drains: NOT_SERVING first, so probes and Envoy's health checks
// move away, then no new RPCs, in-flight ones finished within the timeout.
func (s *Server) shutdown() error {
	s.draining.Store(true)
	s.health.Shutdown()
	s.opts.Logger.Info("shutting down", slog.Duration("drain", s.opts.ShutdownTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	httpErr := errors.Join(s.http.Shutdown(ctx), s.shutdownSides(ctx))
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		return fmt.Errorf("server: in-flight RPCs still running after %v: stopped", s.opts.ShutdownTimeout)
	}
	return httpErr
}
