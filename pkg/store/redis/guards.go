package redis

// Guards: Decide's two guards of Redis: admission, a bound on the work in flight
// (internal/admission), and the circuit breaker (internal/breaker). A
// call is admitted before the breaker is asked, so that a half-open
// breaker's probe is never shed. On a Cluster each master node has its
// breaker (nodes.go): a request asks those of its buckets' nodes, and
// tells each what became of it, so that a failed master opens its own
// circuit only.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// newBreaker is a breaker of the store's options; node names a Cluster
// node in its log lines ("" for the store's own).
func (s *Store) newBreaker(node string) *breaker.Breaker {
	return breaker.New(s.opts.Breaker, s.opts.Clock, circuitLog{s.opts.Logger, s.metrics.breakerOpen, node})
}

// guard is a request's leave from the breakers it asked: each breaker and
// its ticket (room for a few nodes without allocating).
type guard struct {
	bs []*breaker.Breaker
	ts []breaker.Ticket
	sb [4]*breaker.Breaker
	st [4]breaker.Ticket
}

// allow asks the breakers of the buckets of tags: the store's or, on a
// Cluster, each of their nodes' (the store's for a slot of no known
// node). When one refuses, the others are told the request was never
// sent, and on a Cluster the nodes' map is read again.
func (s *Store) allow(tags [][16]byte, g *guard) bool {
	g.bs, g.ts = g.sb[:0], g.st[:0]
	for i := range tags {
		b := s.breakerOf(tags[i])
		if slices.Contains(g.bs, b) {
			continue
		}
		t, ok := b.Allow()
		if !ok {
			if s.nodes != nil {
				s.nodes.stale()
			}
			g.report(breaker.Unsent, nil)
			return false
		}
		g.bs, g.ts = append(g.bs, b), append(g.ts, t)
		if s.nodes == nil {
			break
		}
	}
	return true
}

// report tells each breaker of g what became of the request.
func (g *guard) report(o breaker.Outcome, err error) {
	for i := range g.bs {
		g.bs[i].Report(g.ts[i], o, err)
	}
}

// breakerOf is the breaker of the bucket of tag t.
func (s *Store) breakerOf(t [16]byte) *breaker.Breaker {
	if s.nodes != nil {
		if n := s.nodes.of(tagSlot(t)); n != nil {
			return n.breaker
		}
	}
	return s.breaker
}

// circuitOpen reports whether a circuit is open and, if so, for how long
// the longest open has been.
func (s *Store) circuitOpen() (time.Duration, bool) {
	d, open := s.breaker.OpenFor()
	if s.nodes != nil {
		s.nodes.each(func(n *node) {
			if nd, o := n.breaker.OpenFor(); o && (!open || nd > d) {
				d, open = nd, true
			}
		})
	}
	return d, open
}

// reachable tells every breaker that Redis answers.
func (s *Store) reachable() {
	s.breaker.Reachable()
	if s.nodes != nil {
		s.nodes.each(func(n *node) { n.breaker.Reachable() })
	}
}

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

// circuitLog is what the store says of a breaker: one line when the
// circuit opens and one when it closes, and tokengate_redis_circuit_open
// (the circuits open now). A failed probe, which leaves it open, is only
// a debug line, so that an outage of an hour is two lines, not one per
// backoff. node is a Cluster node's ID, "" for the store's breaker.
type circuitLog struct {
	log  *slog.Logger
	open prometheus.Gauge
	node string
}

func (c circuitLog) Opened(err error, failures int, retryIn time.Duration) {
	c.open.Inc()
	c.log.LogAttrs(context.Background(), slog.LevelWarn, "redis failing: circuit open, on_store_error decides meanwhile",
		c.attrs(slog.String("error", err.Error()), slog.Int("failures", failures), slog.Duration("retry_in", retryIn))...)
}

func (c circuitLog) ProbeFailed(why string, failures int, retryIn time.Duration) {
	c.log.LogAttrs(context.Background(), slog.LevelDebug, "redis probe failed: circuit stays open",
		c.attrs(slog.String("error", why), slog.Int("failures", failures), slog.Duration("retry_in", retryIn))...)
}

func (c circuitLog) Closed(openFor time.Duration) {
	c.open.Dec()
	c.log.LogAttrs(context.Background(), slog.LevelInfo, "redis reachable again: circuit closed", c.attrs(slog.Duration("open_for", openFor))...)
}

// attrs are a line's attributes, with the node's ID on a Cluster node's.
func (c circuitLog) attrs(a ...slog.Attr) []slog.Attr {
	if c.node != "" {
		a = append(a, slog.String("node", c.node))
	}
	return a
}
