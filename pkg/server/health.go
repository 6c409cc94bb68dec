package server

// Health: readiness is "tokengate can answer", not "the store answers".
//
// While a store (Redis) fails, every rule's on_store_error still answers,
// so a replica stays ready: taking every replica out at once (they all
// lose the same Redis) would make Envoy skip the limit altogether
// (failure_mode_deny: false) instead of applying on_store_error. The
// store's state is reported on its own, for alerting: the gRPC health
// service StoreHealthService and the gauge tokengate_store_degraded. With
// Options.ReadyRequiresStore, readiness follows the store too, as it did
// before. A store that has never answered since the start is another
// matter (Options.Ready): a misconfiguration, not an outage, keeps a new
// replica unready. Liveness (/healthz) never depends on the store.

import (
	"context"
	"net/http"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// StoreHealthService is the gRPC health service name that reports the
// store: NOT_SERVING while it cannot decide (on_store_error answering),
// SERVING while it can. Readiness probes use "" instead.
const StoreHealthService = "tokengate.store"

// healthEvery is how often the store is checked for the health statuses.
const healthEvery = time.Second

// storeErr reports why the store cannot decide now, nil when it can.
func (s *Server) storeErr() error {
	if s.opts.Store == nil {
		return nil
	}
	return s.opts.Store()
}

// notReady reports why tokengate is not ready given the store's state:
// while the policy source is not (Options.Ready), or with
// ReadyRequiresStore while the store fails.
func (s *Server) notReady(storeErr error) error {
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			return err
		}
	}
	if s.opts.ReadyRequiresStore {
		return storeErr
	}
	return nil
}

// notReadyNow is notReady with the store checked now, only when readiness
// follows it.
func (s *Server) notReadyNow() error {
	if err := s.notReady(nil); err != nil || !s.opts.ReadyRequiresStore {
		return err
	}
	return s.storeErr()
}

// trackHealth keeps the gRPC health statuses and tokengate_store_degraded
// in step with the store, checked every healthEvery, until the returned
// stop is called.
func (s *Server) trackHealth(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			s.setHealth(s.storeErr())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// setHealth publishes the store's state, storeErr, and the readiness it
// implies.
func (s *Server) setHealth(storeErr error) {
	status := func(err error) healthpb.HealthCheckResponse_ServingStatus {
		if err != nil {
			return healthpb.HealthCheckResponse_NOT_SERVING
		}
		return healthpb.HealthCheckResponse_SERVING
	}
	ready := status(s.notReady(storeErr))
	s.health.SetServingStatus("", ready)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, ready)
	if s.opts.Authorization != nil {
		s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, ready)
	}
	if storeErr != nil {
		why := storeErr.Error()
		s.degraded.Store(&why)
		s.opts.Metrics.StoreDegraded.Set(1)
	} else {
		s.degraded.Store(nil)
		s.opts.Metrics.StoreDegraded.Set(0)
	}
	// Last, so that whoever sees the store's status change sees the rest
	// already in step with it.
	s.health.SetServingStatus(StoreHealthService, status(storeErr))
}

// readyz is GET /readyz: 200 while tokengate can answer, naming a degraded
// store from the latest check; 503 when it cannot (Options.Ready: no policy
// yet from its source, a store never answered; or ReadyRequiresStore and
// the store fails now).
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.notReadyNow(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if why := s.degraded.Load(); why != nil && !s.opts.ReadyRequiresStore {
		w.Write([]byte("ready; store degraded, on_store_error answering: " + *why + "\n"))
		return
	}
	w.Write([]byte("ready\n"))
}
