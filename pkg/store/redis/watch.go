package redis

import (
	"context"
	"log/slog"
	"time"
)

// Watch pings Redis every interval (every <= 0: 1s) until ctx ends, and
// logs each change of reachability once: "redis lost", with the error, at
// the first failed ping after a good one; "redis back", with how long it
// was lost, at the first good ping after that; nothing while nothing
// changes. Watch starts out taking Redis as reachable (the Store is built
// on a client that has connected). So a replica with no traffic still says
// when its Redis went away, which the decisions' breaker cannot; and each
// good ping lets an open circuit probe at once (see Ping), so decisions
// return to Redis within an interval of it coming back.
//
// After each good ping it publishes this replica's shared time, on which
// replicas that start later anchor their clocks (clock.go), and samples
// the number of keys (tokengate_redis_keys).
//
// A ping that fails because ctx ended says nothing about Redis and is not
// logged. Watch returns when ctx ends; run it in its own goroutine.
func (s *Store) Watch(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	s.watch(ctx, t.C)
}

// watch is Watch on the instants of ticks, so that a test decides when
// each ping happens.
func (s *Store) watch(ctx context.Context, ticks <-chan time.Time) {
	var (
		lost   bool
		lostAt time.Time
		failed int // pings failed since lost
	)
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-ticks:
		}
		err := s.Ping(ctx)
		if err == nil {
			err = s.publishClock(ctx)
		}
		if err == nil {
			// A refused count (an ACL without DBSIZE) says nothing of
			// Redis's reachability.
			s.SampleKeys(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !lost:
			lost, lostAt, failed = true, now, 1
			s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "redis lost", slog.String("error", err.Error()))
		case err != nil:
			failed++
		case lost:
			lost = false
			s.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "redis back",
				slog.Duration("lost_for", now.Sub(lostAt)), slog.Int("failed_pings", failed))
		}
	}
}
