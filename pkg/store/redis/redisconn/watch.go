package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/rueidis"
)

// Ping checks that Redis answers: every node of a Cluster, else the one
// node c talks to.
func Ping(ctx context.Context, c rueidis.Client) error {
	var err error
	if c.Mode() == rueidis.ClientModeCluster {
		for addr, n := range c.Nodes() {
			if e := n.Do(ctx, n.B().Ping().Build()).Error(); e != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", addr, e))
			}
		}
	} else {
		err = c.Do(ctx, c.B().Ping().Build()).Error()
	}
	if err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Watch calls check every interval (every <= 0: 1s) until ctx ends, and
// logs each change of reachability once: "redis lost", with the error, at
// the first failed check after a good one; "redis back", with how long it
// was lost, at the first good check after that; nothing while nothing
// changes. Watch starts out taking Redis as reachable (its caller has
// connected). So a replica with no traffic still says when its Redis went
// away. check is a Ping, and whatever else is to be done while Redis
// answers (the Redis store publishes its clock and samples its keys).
//
// A check that fails because ctx ended says nothing about Redis and is not
// logged. Watch returns when ctx ends; run it in its own goroutine.
func Watch(ctx context.Context, every time.Duration, check func(context.Context) error, log *slog.Logger) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	watch(ctx, t.C, check, log)
}

// watch is Watch on the instants of ticks, so that a test decides when
// each check happens.
func watch(ctx context.Context, ticks <-chan time.Time, check func(context.Context) error, log *slog.Logger) {
	var (
		lost   bool
		lostAt time.Time
		failed int // checks failed since lost
	)
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-ticks:
		}
		err := check(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !lost:
			lost, lostAt, failed = true, now, 1
			log.LogAttrs(ctx, slog.LevelWarn, "redis lost", slog.String("error", err.Error()))
		case err != nil:
			failed++
		case lost:
			lost = false
			log.LogAttrs(ctx, slog.LevelInfo, "redis back",
				slog.Duration("lost_for", now.Sub(lostAt)), slog.Int("failed_pings", failed))
		}
	}
}
