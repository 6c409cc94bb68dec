package redis

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestBreaker: failures in a row open the circuit; while open no call is
// tried; after the backoff one probe goes through; success closes it, a
// failure doubles the backoff.
func TestBreaker(t *testing.T) {
	clk := new(clock.Fake)
	b := newBreaker(BreakerOptions{Failures: 2, Window: -1, MinBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), clk)
	fail := errors.New("down")
	b.failure(fail, clk.Now())
	if !b.allow() {
		t.Fatal("one failure opened the circuit")
	}
	b.failure(fail, clk.Now())
	if b.allow() {
		t.Fatal("two failures left the circuit closed")
	}
	clk.Add(130 * time.Millisecond) // past the backoff and its jitter
	if !b.allow() || b.allow() {
		t.Fatal("half-open: want exactly one probe")
	}
	b.failure(fail, clk.Now())
	clk.Add(150 * time.Millisecond)
	if b.allow() {
		t.Fatal("a failed probe did not double the backoff")
	}
	clk.Add(110 * time.Millisecond)
	if !b.allow() {
		t.Fatal("no probe after the doubled backoff")
	}
	b.success()
	for range 2 { // allow has effects: both calls must pass
		if !b.allow() {
			t.Fatal("success did not close the circuit")
		}
	}
}

// TestBreakerCountsAStallOnce: calls in flight together that fail
// together (one stall timing them all out) are one failure; a call
// started after a counted failure counts again.
func TestBreakerCountsAStallOnce(t *testing.T) {
	clk := new(clock.Fake)
	b := newBreaker(BreakerOptions{Failures: 3, Window: -1}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), clk)
	fail := errors.New("timeout")
	started := clk.Now()
	clk.Add(15 * time.Millisecond)
	for range 64 {
		b.failure(fail, started)
	}
	if !b.allow() {
		t.Fatal("64 calls timed out by one stall opened the circuit")
	}
	for range 2 {
		started = clk.Now()
		clk.Add(15 * time.Millisecond)
		b.failure(fail, started)
	}
	if b.allow() {
		t.Fatal("three failures of calls made one after another left the circuit closed")
	}
}

// TestBreakerWindow: failures in a row open the circuit only once they
// span the window, so a short stall never opens it; a success in between
// starts over.
func TestBreakerWindow(t *testing.T) {
	clk := new(clock.Fake)
	b := newBreaker(BreakerOptions{Failures: 3}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), clk)
	fail := errors.New("timeout")
	step := func(d time.Duration) {
		started := clk.Now()
		clk.Add(d)
		b.failure(fail, started)
	}
	for range 5 { // 75ms of failures in a row: a stall
		step(15 * time.Millisecond)
	}
	if !b.allow() {
		t.Fatal("failures over 75ms opened the circuit")
	}
	b.success()
	for range 14 { // the last 195ms after the first of these
		step(15 * time.Millisecond)
	}
	if !b.allow() {
		t.Fatal("failures over less than the 200ms window opened the circuit")
	}
	step(15 * time.Millisecond)
	if b.allow() {
		t.Fatal("failures over 210ms left the circuit closed")
	}
}

// TestRedisDown: a dead Redis fails fast with ErrUnavailable once the
// circuit opens, and a live one is used again after a successful ping.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	s := newStore(t, c, Options{Timeout: 50 * time.Millisecond, Breaker: BreakerOptions{Window: -1, MinBackoff: time.Hour}})
	v := storetest.Version(t, 1, 10, "1/s")
	decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 1})
	srv.Kill()
	var err error
	for range 3 {
		_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
		if err == nil {
			t.Fatal("no error with Redis down")
		}
	}
	begin := time.Now()
	_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
	if !errors.Is(err, store.ErrUnavailable) || time.Since(begin) > 10*time.Millisecond {
		t.Fatalf("open circuit: %v after %v, want ErrUnavailable at once", err, time.Since(begin))
	}
	if s.Ping(context.Background()) == nil {
		t.Fatal("ping succeeded with Redis down")
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("ping still failing 10s after Redis restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A pipelined connection that died with the old server fails its
	// first command (never retried: a decision is not idempotent); each
	// ping lets the breaker probe again at once.
	res := make([]store.Result, 1)
	for i := 0; ; i++ {
		_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, res)
		if err == nil {
			break
		}
		if i == 10 {
			t.Fatalf("still failing after Redis came back: %v", err)
		}
		s.Ping(context.Background())
	}
	if res[0].Remaining != 9 {
		t.Fatalf("after recovery: %+v (a fresh Redis: 9 left)", res[0])
	}
}

// TestCrossSlotRequestID: on a Cluster, a request whose buckets span slots
// replays its answer for a repeated id, and concurrent duplicates are
// charged once.
func TestCrossSlotRequestID(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c, Options{})
	v := storetest.Version(t, 1, 100, "1/h")
	items := []store.Item{{Key: "x", Version: v, Cost: 10}, {Key: "y", Version: v, Cost: 10}, {Key: "z", Version: v, Cost: 10}}
	if len(bySlot([]string{tag("x"), tag("y"), tag("z")})) < 2 {
		t.Fatal("test keys share a slot: pick others")
	}
	var wg sync.WaitGroup
	outs := make([]store.Outcome, 8)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]store.Result, len(items))
			out, err := s.Decide(context.Background(), &store.Request{ID: "dup", Items: items}, res)
			if err != nil {
				t.Error(err)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	decided := 0
	for _, o := range outs {
		if !o.Allowed {
			t.Fatalf("a duplicate was rejected: %+v", outs)
		}
		if !o.Replayed {
			decided++
		}
	}
	// At most MaxReplays+1 answers replay or decide once each: more than
	// that many concurrent duplicates are decided anew by design.
	_, res := decide(t, s, 0, store.Item{Key: "x", Version: v})
	if charged := (100 - res[0].Remaining) / 10; charged != int64(decided) || decided > len(outs)-store.MaxReplays {
		t.Fatalf("%d decided, %d charged on x (outcomes %+v)", decided, charged, outs)
	}
	if !strings.Contains(s.idKey(tagBytes("x"), "dup"), tag("x")) {
		t.Fatal("the id key is not in the first bucket's slot")
	}
}
