package redis

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/redistest"
)

// logBuffer collects a JSON slog handler's lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// messages returns the msg of every line so far.
func (l *logBuffer) messages(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec.Msg)
	}
	return out
}

// TestWatch: on a store nobody calls, Redis going away and coming back are
// one line each, however many pings fail in between, and nothing is
// logged while nothing changes or when the watch is stopped.
func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	var logs logBuffer
	s := newStore(t, newClient(t, srv.Addr()), Options{Logger: logs.logger()})
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watch(ctx, ticks)
	}()
	at := time.Unix(0, 0)
	// A send returns once watch has taken the tick, so every ping before
	// it has finished and logged.
	tick := func() {
		at = at.Add(time.Second)
		ticks <- at
	}
	for range 3 {
		tick()
	}
	if m := logs.messages(t); len(m) != 0 {
		t.Fatalf("Redis up, logged %q", m)
	}
	srv.Stop()
	for range 6 {
		tick()
	}
	if m := logs.messages(t); len(m) != 1 || m[0] != "redis lost" {
		t.Fatalf("5 pings with Redis down logged %q, want one \"redis lost\"", m)
	}
	srv.Restart()
	// The client's connection died with the old server: a ping or two may
	// fail before it dials again.
	for i := 0; !strings.Contains(strings.Join(logs.messages(t), ","), "redis back"); i++ {
		if i == 20 {
			t.Fatalf("20 pings after Redis restarted, logged %q", logs.messages(t))
		}
		tick()
	}
	for range 3 {
		tick()
	}
	cancel()
	<-done
	if m := logs.messages(t); len(m) != 2 || m[0] != "redis lost" || m[1] != "redis back" {
		t.Fatalf("logged %q, want \"redis lost\", \"redis back\"", m)
	}
}

// TestWatchStops: Watch on its own ticker returns when its context ends.
func TestWatchStops(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{Logger: new(logBuffer).logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Watch(ctx, time.Millisecond)
	}()
	cancel()
	<-done
}
