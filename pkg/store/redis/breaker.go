package redis

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BreakerOptions tune the circuit breaker that stops a Store from
// hammering a Redis that is down. Zero fields take the defaults.
type BreakerOptions struct {
	// Failures in a row that open the circuit [3]. Calls that were in
	// flight together count once: a failure counts only if its call
	// started after the last counted failure, so that one stall (of Redis,
	// the network or this process) that times out every call in flight is
	// one failure, not one per call.
	Failures int
	// Window is the least time from the first of those failures to the
	// one that opens the circuit [200ms]: a stall of Redis or of this
	// host (a busy machine, a GC pause) times calls out for tens of
	// milliseconds, and an open circuit would answer every request by
	// on_store_error for a whole backoff on top of it; an outage lasts
	// longer. Until then failing calls each wait their timeout. Below
	// zero, no window.
	Window time.Duration
	// MinBackoff is the first open period [100ms]; each failed probe
	// doubles it, up to MaxBackoff [5s].
	MinBackoff, MaxBackoff time.Duration
}

// breaker is closed (calls go through), open (calls fail at once, for a
// backoff with jitter) or half-open (one probe call goes through; success
// closes, failure reopens with twice the backoff). It logs each change
// between closed and open once: a failed probe, which leaves it open, is
// only a debug line, so that an outage of an hour is two lines, not one
// per backoff.
type breaker struct {
	opts    BreakerOptions
	log     *slog.Logger
	gauge   prometheus.Gauge
	now     func() time.Time
	mu      sync.Mutex
	fails   int
	first   time.Time // when the first of the failures in a row was seen
	counted time.Time // when the last counted failure was seen
	open    bool
	until   time.Time // end of the backoff
	since   time.Time // when it opened
	backoff time.Duration
	probing bool
}

func newBreaker(o BreakerOptions, log *slog.Logger, gauge prometheus.Gauge) *breaker {
	if o.Failures <= 0 {
		o.Failures = 3
	}
	if o.Window == 0 {
		o.Window = 200 * time.Millisecond
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	return &breaker{opts: o, log: log, gauge: gauge, now: time.Now}
}

// allow reports whether a call may go to Redis now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if b.probing || b.now().Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	if b.open {
		b.open, b.probing, b.backoff = false, false, 0
		b.gauge.Set(0)
		b.log.Info("redis reachable again: circuit closed", slog.Duration("open_for", b.now().Sub(b.since)))
	}
}

// failure is told of a call, started at started, that failed.
func (b *breaker) failure(err error, started time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if started.Before(b.counted) && !(b.open && b.probing) {
		return
	}
	b.counted = b.now()
	if b.fails == 0 {
		b.first = b.counted
	}
	b.fails++
	opened := false
	switch {
	case b.open && b.probing:
		b.probing = false
		b.backoff = min(2*b.backoff, b.opts.MaxBackoff)
	case !b.open && b.fails >= b.opts.Failures && b.counted.Sub(b.first) >= b.opts.Window:
		b.open, b.backoff, b.since = true, b.opts.MinBackoff, b.now()
		b.gauge.Set(1)
		opened = true
	default:
		return
	}
	// Up to a quarter of jitter, so that replicas do not probe in step.
	d := b.backoff + time.Duration(rand.Int64N(int64(b.backoff)/4+1))
	b.until = b.now().Add(d)
	level, msg := slog.LevelDebug, "redis probe failed: circuit stays open"
	if opened {
		level, msg = slog.LevelWarn, "redis failing: circuit open, on_store_error decides meanwhile"
	}
	b.log.LogAttrs(context.Background(), level, msg,
		slog.String("error", err.Error()), slog.Int("failures", b.fails), slog.Duration("retry_in", d))
}

// reachable is told by a successful ping: the next call may probe at once.
func (b *breaker) reachable() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open && !b.probing {
		b.until = b.now()
	}
}
