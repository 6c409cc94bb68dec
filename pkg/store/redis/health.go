package redis

// What the store says of its Redis: whether it answers (Ping, Health,
// Watch), whether it bounds tokengate's keys (CheckLimits) and how many it
// holds (SampleKeys). The work is redisconn's, on the store's client; the
// store adds its timeouts, its breaker and its metrics.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// Ping checks that Redis answers, for readiness; it bypasses the breaker
// and, when Redis answers, lets the breaker try again at once.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Timeout, 250*time.Millisecond))
	defer cancel()
	if err := redisconn.Ping(ctx, s.client); err != nil {
		if s.nodes != nil {
			s.nodes.reachable(ctx)
		}
		return err
	}
	s.reachable()
	return nil
}

// Health reports why the store cannot decide now, nil when it can: Redis
// answers a ping and the circuit is closed. A good ping lets an open
// circuit probe with the next call, which closes it when Redis answers;
// until then decisions are on_store_error's, and Health says so.
func (s *Store) Health(ctx context.Context) error {
	if err := s.Ping(ctx); err != nil {
		return err
	}
	if d, open := s.circuitOpen(); open {
		return fmt.Errorf("redis: %w: circuit open for %v: Redis answers pings, the next decision probes it", store.ErrUnavailable, d.Round(time.Millisecond))
	}
	return nil
}

// Watch pings Redis every interval (every <= 0: 1s) until ctx ends, and
// logs Redis lost and back once each (redisconn.Watch). So a replica with
// no traffic still says when its Redis went away, which the decisions'
// breaker cannot; and each good ping lets an open circuit probe at once
// (see Ping), so decisions return to Redis within an interval of it
// coming back.
//
// After each good ping it publishes this replica's shared time, on which
// replicas that start later anchor their clocks (clock.go), and samples
// the number of keys (tokengate_redis_keys). Watch returns when ctx ends;
// run it in its own goroutine.
func (s *Store) Watch(ctx context.Context, every time.Duration) {
	redisconn.Watch(ctx, every, s.watchCheck, s.opts.Logger)
}

// watchCheck is one check of Watch.
func (s *Store) watchCheck(ctx context.Context) error {
	err := s.Ping(ctx)
	if err == nil {
		err = s.publishClock(ctx)
	}
	if err == nil {
		// A refused count (an ACL without DBSIZE) says nothing of
		// Redis's reachability.
		s.SampleKeys(ctx)
	}
	return err
}

// CheckLimits reads maxmemory and maxmemory-policy on every node
// (redisconn.CheckLimits, within the store's timeout and at least 1s),
// and sets tokengate_redis_config_unsafe and
// tokengate_redis_config_checks_total. It is safe for concurrent use, and
// meant for once at start.
func (s *Store) CheckLimits(ctx context.Context) redisconn.Limits {
	l := redisconn.CheckLimits(ctx, s.client, max(s.opts.Timeout, time.Second))
	reasons := l.Reasons()
	for _, r := range redisconn.AllReasons {
		v := 0.0
		if slices.Contains(reasons, r) {
			v = 1
		}
		s.metrics.configUnsafe.WithLabelValues(r).Set(v)
	}
	s.metrics.configChecks.WithLabelValues(l.Verdict.String()).Inc()
	return l
}

// SampleKeys sets tokengate_redis_keys to the keys of tokengate's
// database (redisconn.CountKeys) and returns it. Every replica reports
// the same Redis-wide value (aggregate with max, not sum). It is safe for
// concurrent use; on an error the gauge keeps its last value.
func (s *Store) SampleKeys(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Timeout, 250*time.Millisecond))
	defer cancel()
	n, err := redisconn.CountKeys(ctx, s.client)
	if err != nil {
		return 0, err
	}
	s.metrics.keys.Set(float64(n))
	return n, nil
}
