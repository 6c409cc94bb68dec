package redis

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
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
	// ProbeTimeout is how long a half-open circuit waits for its probe to
	// report [1s]: longer than any call takes (the store's timeout, and
	// the 250ms more an ambiguous call waits for its answer). A probe not
	// reported by then failed, so that no lost report can hold the
	// circuit open for ever.
	ProbeTimeout time.Duration
}

// outcome is what became of a call the breaker let through.
type outcome int

const (
	// succeeded: Redis answered.
	succeeded outcome = iota
	// failed: Redis failed the call, or did not answer it in time.
	failed
	// inconclusive: the call said nothing of Redis's health: a heavy
	// request that timed out (its own cost is high), which a probe
	// still counts as failed.
	inconclusive
	// unsent: the call never reached Redis, or its caller gave up on
	// it: a probe's turn passes to the next call, at once.
	unsent
)

// ticket is a call's leave from allow; its outcome goes back through
// report, whatever it is.
type ticket struct {
	started int64  // when it was let through
	probe   uint64 // the probe's number; 0: not a probe
}

// breaker is closed (calls go through), open (calls fail at once, for a
// backoff with jitter) or half-open (one probe call goes through; success
// closes, failure reopens with twice the backoff; a probe that never
// reached Redis hands its turn to the next call; one not reported within
// ProbeTimeout failed). It logs each change between closed and open once:
// a failed probe, which leaves it open, is only a debug line, so that an
// outage of an hour is two lines, not one per backoff. Instants are
// readings of its clock (the store's). It is safe for concurrent use.
type breaker struct {
	opts    BreakerOptions
	log     *slog.Logger
	gauge   prometheus.Gauge
	clk     clock.Clock
	mu      sync.Mutex
	fails   int
	first   int64 // when the first of the failures in a row was seen
	counted int64 // when the last counted failure was seen
	open    bool
	until   int64 // end of the backoff
	since   int64 // when it opened
	backoff time.Duration
	probe   uint64 // the probe out, 0: none
	probes  uint64 // probes let through so far
	probeBy int64  // when the probe out has failed if not reported
}

func newBreaker(o BreakerOptions, log *slog.Logger, gauge prometheus.Gauge, clk clock.Clock) *breaker {
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
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = time.Second
	}
	// No failure was counted yet: every call started after "the last".
	return &breaker{opts: o, log: log, gauge: gauge, clk: clk, counted: math.MinInt64}
}

// allow reports whether a call may go to Redis now and, when it may, the
// ticket its outcome is reported with.
func (b *breaker) allow() (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	if !b.open {
		return ticket{started: now}, true
	}
	b.expire(now)
	if b.probe != 0 || now < b.until {
		return ticket{}, false
	}
	b.probes++
	b.probe, b.probeBy = b.probes, now+int64(b.opts.ProbeTimeout)
	return ticket{started: now, probe: b.probe}, true
}

// report is told what became of the call t let through; err is its error
// (nil when it succeeded).
func (b *breaker) report(t ticket, o outcome, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.expire(now)
	probe := t.probe != 0 && t.probe == b.probe
	switch {
	case o == succeeded:
		b.closeLocked(now)
	case probe && o == unsent:
		// Neither way: the next call probes at once.
		b.probe, b.until = 0, now
	case probe:
		b.probeFailed(now, err.Error())
	case t.probe != 0 || o != failed:
		// A probe already given up on, or nothing learnt.
	case t.started >= b.counted:
		b.countFailure(now, err)
	}
}

// expire fails the probe out if its ProbeTimeout has passed by now, at
// its deadline, when its backoff starts; its report, if it comes, is then
// a stale probe's.
func (b *breaker) expire(now int64) {
	if b.probe != 0 && now >= b.probeBy {
		b.probeFailed(b.probeBy, "probe not reported within its timeout")
	}
}

func (b *breaker) closeLocked(now int64) {
	b.fails = 0
	if b.open {
		b.open, b.probe, b.backoff = false, 0, 0
		b.gauge.Set(0)
		b.log.Info("redis reachable again: circuit closed", slog.Duration("open_for", time.Duration(now-b.since)))
	}
}

// countFailure counts a failure of a closed circuit's call, and opens the
// circuit after enough of them over the window.
func (b *breaker) countFailure(now int64, err error) {
	b.counted = now
	if b.fails == 0 {
		b.first = now
	}
	b.fails++
	if b.open || b.fails < b.opts.Failures || time.Duration(now-b.first) < b.opts.Window {
		return
	}
	b.open, b.backoff, b.since = true, b.opts.MinBackoff, now
	b.gauge.Set(1)
	d := b.backOff(now)
	b.log.LogAttrs(context.Background(), slog.LevelWarn, "redis failing: circuit open, on_store_error decides meanwhile",
		slog.String("error", err.Error()), slog.Int("failures", b.fails), slog.Duration("retry_in", d))
}

// probeFailed reopens the circuit for twice the backoff.
func (b *breaker) probeFailed(now int64, why string) {
	b.probe, b.counted = 0, now
	b.fails++
	b.backoff = min(2*b.backoff, b.opts.MaxBackoff)
	d := b.backOff(now)
	b.log.LogAttrs(context.Background(), slog.LevelDebug, "redis probe failed: circuit stays open",
		slog.String("error", why), slog.Int("failures", b.fails), slog.Duration("retry_in", d))
}

// backOff starts a backoff at now, with up to a quarter of jitter so that
// replicas do not probe in step, and returns its length.
func (b *breaker) backOff(now int64) time.Duration {
	d := b.backoff + time.Duration(rand.Int64N(int64(b.backoff)/4+1))
	b.until = now + int64(d)
	return d
}

// reachable is told by a successful ping: the next call may probe at once.
func (b *breaker) reachable() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.expire(now)
	if b.open && b.probe == 0 {
		b.until = now
	}
}

// openFor reports whether the circuit is open and, if so, for how long.
func (b *breaker) openFor() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.clk.Now() - b.since), b.open
}
