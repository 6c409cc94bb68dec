package redisconn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/logtest"
	"github.com/tokengate/tokengate/internal/redistest"
)

// pinger is a watch's check that pings c, within a second.
func pinger(c rueidis.Client) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return Ping(ctx, c)
	}
}

// TestWatch: on a client nobody uses, Redis going away and coming back are
// one line each, however many pings fail in between, and nothing is
// logged while nothing changes or when the watch is stopped.
func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	var logs logtest.Recorder
	c := dialT(t, Config{Addr: srv.Addr()})
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watch(ctx, ticks, pinger(c), logs.Logger())
	}()
	at := time.Unix(0, 0)
	// A send returns once watch has taken the tick, so every check before
	// it has finished and logged.
	tick := func() {
		at = at.Add(time.Second)
		ticks <- at
	}
	for range 3 {
		tick()
	}
	if m := logs.Messages(); len(m) != 0 {
		t.Fatalf("Redis up, logged %q", m)
	}
	srv.Stop()
	for range 6 {
		tick()
	}
	if m := logs.Messages(); len(m) != 1 || m[0] != "redis lost" {
		t.Fatalf("5 pings with Redis down logged %q, want one \"redis lost\"", m)
	}
	srv.Restart()
	// The client's connection died with the old server: a ping or two may
	// fail before it dials again.
	for i := 0; !strings.Contains(strings.Join(logs.Messages(), ","), "redis back"); i++ {
		if i == 20 {
			t.Fatalf("20 pings after Redis restarted, logged %q", logs.Messages())
		}
		tick()
	}
	for range 3 {
		tick()
	}
	cancel()
	<-done
	if m := logs.Messages(); len(m) != 2 || m[0] != "redis lost" || m[1] != "redis back" {
		t.Fatalf("logged %q, want \"redis lost\", \"redis back\"", m)
	}
}

// TestWatchStops: Watch on its own ticker returns when its context ends.
func TestWatchStops(t *testing.T) {
	srv := redistest.Start(t)
	c := dialT(t, Config{Addr: srv.Addr()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, time.Millisecond, pinger(c), new(logtest.Recorder).Logger())
	}()
	cancel()
	<-done
}
