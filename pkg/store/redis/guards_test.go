package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/logtest"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/internal/breaker"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestAdmitShedIsNotABreakerFailure: with the budget held, Decide sheds:
// ErrUnavailable, counted as "shed", and no breaker failure however many
// in a row; once room is back Redis decides again.
func TestAdmitShedIsNotABreakerFailure(t *testing.T) {
	srv := redistest.Start(t)
	// One failure would open the circuit.
	s := newStore(t, newClient(t, srv.Addr()), Options{Admission: AdmissionOptions{Budget: new(4), Wait: time.Millisecond}, Breaker: BreakerOptions{Failures: 1, Window: new(time.Duration(0))}})
	v := storetest.Version(t, 1, 10, "1/s")
	if err := s.admit.Acquire(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	for range 5 { // more than BreakerOptions.Failures
		_, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Decide with the budget held: %v, want ErrUnavailable and the deadline", err)
		}
	}
	if n := testutil.ToFloat64(s.metrics.errors.WithLabelValues("shed")); n != 5 {
		t.Fatalf("shed counted %v times, want 5", n)
	}
	if _, open := s.breaker.OpenFor(); open {
		t.Fatal("shedding counted as a breaker failure")
	}
	s.admit.Release(4)
	out, res := decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 1})
	if !out.Allowed || res[0].Remaining != 9 {
		t.Fatalf("after room came back: %+v %+v", out, res[0])
	}
	for _, c := range []string{"light", "heavy"} {
		if n := testutil.ToFloat64(s.metrics.inFlight.WithLabelValues(c)); n != 0 {
			t.Fatalf("%v %s items in flight after Decide returned", n, c)
		}
	}
}

// TestHeavyTimeoutIsNotABreakerFailure: while Redis answers nothing
// (CLIENT PAUSE), heavy requests time out without opening the breaker;
// light ones that time out open it, as Redis down would.
func TestHeavyTimeoutIsNotABreakerFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	s := newStore(t, c, Options{Timeout: 20 * time.Millisecond, Breaker: BreakerOptions{Failures: 2, Window: new(time.Duration(0))}})
	v := storetest.Version(t, 1, 10, "1/s")
	warm(t, s, store.Item{Key: "warm", Version: v, Cost: 1})
	heavy := make([]store.Item, 16)
	for i := range heavy {
		heavy[i] = store.Item{Key: "h" + strconv.Itoa(i), Version: v, Cost: 1}
	}
	if _, err := redistest.Do(srv.Addr(), "CLIENT", "PAUSE", "2000", "ALL"); err != nil {
		t.Fatal(err)
	}
	open := func() bool {
		_, open := s.breaker.OpenFor()
		return open
	}
	for range 4 {
		if _, err := s.Decide(context.Background(), &store.Request{Items: heavy}, make([]store.Result, len(heavy))); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("heavy request while Redis is paused: %v, want a timeout", err)
		}
	}
	if open() {
		t.Fatal("heavy requests' timeouts opened the breaker")
	}
	for range 2 {
		s.Decide(context.Background(), &store.Request{Items: heavy[:1]}, make([]store.Result, 1))
	}
	if !open() {
		t.Fatal("light requests' timeouts left the breaker closed")
	}
}

// TestBreakerLogsChanges: the breaker logs opening and closing once each;
// its failed probes while open log nothing at the info level.
func TestBreakerLogsChanges(t *testing.T) {
	clk := new(clock.Fake)
	var logs logtest.Recorder
	b := breaker.New(BreakerOptions{Failures: 3, Window: new(time.Duration(0)), MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond},
		clk, circuitLog{logs.Logger(), prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), ""})
	call := func(o breaker.Outcome) {
		if tk, ok := b.Allow(); ok {
			b.Report(tk, o, errors.New("down"))
		} else if o == breaker.Succeeded {
			t.Fatal("no call let through to succeed")
		}
	}
	for range 3 {
		call(breaker.Failed)
	}
	for range 5 { // failed probes, each after its backoff and jitter
		clk.Add(time.Second)
		tk, ok := b.Allow()
		if !ok {
			t.Fatal("no probe after the backoff")
		}
		b.Report(tk, breaker.Failed, errors.New("down"))
	}
	clk.Add(time.Second)
	for range 3 {
		call(breaker.Succeeded)
	}
	for range 3 {
		call(breaker.Failed)
	}
	want := []string{
		"redis failing: circuit open, on_store_error decides meanwhile",
		"redis reachable again: circuit closed",
		"redis failing: circuit open, on_store_error decides meanwhile",
	}
	if m := logs.Messages(); strings.Join(m, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged %q, want %q", m, want)
	}
}
