package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Limits on the shape of a request (see the package comment).
const (
	MaxDescriptors = store.MaxItems
	MaxEntries     = 32
	MaxKeyBytes    = 256
	MaxValueBytes  = 4096
)

// Options configure a Service. Policy, Store and Metrics are required.
type Options struct {
	// Policy returns the policy now serving; it is called once per request.
	Policy func() *policy.Policy
	Store  store.Store
	// StoreName labels tokengate_store_errors_total ("memory", "redis").
	StoreName string
	Metrics   *metrics.Metrics
	Clock     clock.Clock  // [monotonic clock]
	Logger    *slog.Logger // [slog.Default()]
}

// Service implements rlsv3.RateLimitServiceServer.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts    Options
	rules   atomic.Pointer[ruleTable]
	scratch sync.Pool
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Policy == nil || opts.Store == nil || opts.Metrics == nil {
		return nil, errors.New("service: Policy, Store and Metrics are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{opts: opts}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// ShouldRateLimit implements the ratelimit.v3 RPC.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := s.opts.Clock.Now()
	if err := checkShape(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	pol := s.opts.Policy()
	rules := s.ruleTable(pol)
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)

	sc.plan(pol, req)
	sc.decide(ctx, s.opts.Store, now)
	if err := errors.Join(sc.enforced.err, sc.shadow.err); err != nil {
		s.opts.Metrics.StoreErrors.WithLabelValues(s.opts.StoreName).Inc()
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "store failed; rules' on_store_error decides",
			slog.String("store", s.opts.StoreName), slog.String("error", err.Error()))
	}
	return sc.respond(req, rules, s.opts.Metrics), nil
}

// checkShape refuses what Envoy's configuration, not a client, got wrong.
func checkShape(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return errors.New("domain is empty")
	case len(req.GetDescriptors()) == 0:
		return errors.New("no descriptors")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return fmt.Errorf("%d descriptors: at most %d", len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if n := len(d.GetEntries()); n == 0 || n > MaxEntries {
			return fmt.Errorf("descriptor %d has %d entries: want 1 to %d", i, n, MaxEntries)
		}
		for j, e := range d.Entries {
			if k := len(e.GetKey()); k == 0 || k > MaxKeyBytes {
				return fmt.Errorf("descriptor %d entry %d: key of %d bytes: want 1 to %d", i, j, k, MaxKeyBytes)
			}
		}
	}
	return nil
}
