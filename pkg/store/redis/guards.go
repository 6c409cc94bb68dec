package redis

// Guards: Decide's two guards of Redis: admission, a bound on the work in flight
// (internal/admission), and the circuit breaker (internal/breaker). A
// call is admitted before the breaker is asked, so that a half-open
// breaker's probe is never shed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/internal/admission"
	"github.com/tokengate/tokengate/pkg/store/redis/internal/breaker"
)

// AdmissionOptions bound the Redis work one Store (one replica) has in
// flight, weighted by buckets (package admission, which states each
// field's default). A request not admitted in time is shed: an error
// wrapping store.ErrUnavailable, counted as reason "shed", and no breaker
// failure (the client is expensive, Redis is not down).
type AdmissionOptions = admission.Options

// BreakerOptions tune the circuit breaker that stops a Store from
// hammering a Redis that is down (package breaker, which states each
// field's default). Every Decide that reaches the breaker reports what
// became of its call (Store.judge): an answer, a failure, a heavy request
// that timed out (inconclusive), or a call never sent.
type BreakerOptions = breaker.Options

// shed is Decide's error for a request of n items that was not admitted
// (err is from Acquire), counted as "shed" unless the caller gave up. It
// is not a breaker failure: Redis did not fail, it was kept from overload.
func (s *Store) shed(ctx context.Context, n int, err error) error {
	if ctx.Err() == nil {
		s.metrics.errors.WithLabelValues("shed").Inc()
	}
	return fmt.Errorf("redis: %w: shed: no room for %d items among the work in flight: %w", store.ErrUnavailable, n, err)
}

// judge says what a call's error tells of Redis, and counts the error.
func (s *Store) judge(ctx context.Context, err error, items int) breaker.Outcome {
	switch {
	case err == nil:
		return breaker.Succeeded
	case errors.Is(err, errQueued):
		// Never sent: it waited behind calls in flight, which say
		// themselves whether Redis fails.
		s.metrics.errors.WithLabelValues("queued").Inc()
		return breaker.Unsent
	case ctx.Err() != nil:
		// The caller gave up: not Redis's failure.
		return breaker.Unsent
	case !errors.Is(err, context.DeadlineExceeded):
		s.metrics.errors.WithLabelValues("error").Inc()
		return breaker.Failed
	}
	s.metrics.errors.WithLabelValues("timeout").Inc()
	// A heavy request that times out says its own cost is high, not
	// that Redis is down: light requests (and errors) open the breaker.
	if s.admit.IsHeavy(items) {
		return breaker.Inconclusive
	}
	return breaker.Failed
}

// circuitLog is what the store says of its breaker: one line when the
// circuit opens and one when it closes, and tokengate_redis_circuit_open.
// A failed probe, which leaves it open, is only a debug line, so that an
// outage of an hour is two lines, not one per backoff.
type circuitLog struct {
	log  *slog.Logger
	open prometheus.Gauge
}

func (c circuitLog) Opened(err error, failures int, retryIn time.Duration) {
	c.open.Set(1)
	c.log.LogAttrs(context.Background(), slog.LevelWarn, "redis failing: circuit open, on_store_error decides meanwhile",
		slog.String("error", err.Error()), slog.Int("failures", failures), slog.Duration("retry_in", retryIn))
}

func (c circuitLog) ProbeFailed(why string, failures int, retryIn time.Duration) {
	c.log.LogAttrs(context.Background(), slog.LevelDebug, "redis probe failed: circuit stays open",
		slog.String("error", why), slog.Int("failures", failures), slog.Duration("retry_in", retryIn))
}

func (c circuitLog) Closed(openFor time.Duration) {
	c.open.Set(0)
	c.log.Info("redis reachable again: circuit closed", slog.Duration("open_for", openFor))
}
