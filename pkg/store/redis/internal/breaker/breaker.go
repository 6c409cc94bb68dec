package breaker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tokengate/tokengate/pkg/clock"
)

// Options tune a Breaker. Zero fields take the defaults, but Window,
// which can be off, is set by a pointer: nil for the default, a pointer
// to 0 for none.
type Options struct {
	// Failures in a row that open the circuit [3]. Calls that were in
	// flight together count once: a failure counts only if its call
	// started after the last counted failure, so that one stall (of the
	// service, the network or this process) that times out every call in
	// flight is one failure, not one per call.
	Failures int
	// Window is the least time from the first of those failures to the
	// one that opens the circuit [200ms]: a stall of the service or of
	// this host (a busy machine, a GC pause) times calls out for tens of
	// milliseconds, and an open circuit would fail every call for a whole
	// backoff on top of it; an outage lasts longer. Until then failing
	// calls each wait their timeout [nil: 200ms]; 0: no window, failures
	// in a row open the circuit however close together.
	Window *time.Duration
	// MinBackoff is the first open period [100ms]; each failed probe
	// doubles it, up to MaxBackoff [5s].
	MinBackoff, MaxBackoff time.Duration
	// ProbeTimeout is how long a half-open circuit waits for its probe to
	// report [1s]: longer than any call takes. A probe not reported by
	// then failed, so that no lost report can hold the circuit open for
	// ever.
	ProbeTimeout time.Duration
}

// Check says what is wrong with o, nil when nothing is.
func (o Options) Check() error {
	if o.Window != nil && *o.Window < 0 {
		return fmt.Errorf("breaker: window %v: want a duration, or 0 for none", *o.Window)
	}
	return nil
}

// Outcome is what became of a call the breaker let through.
type Outcome int

const (
	// Succeeded: the service answered.
	Succeeded Outcome = iota
	// Failed: the service failed the call, or did not answer it in time.
	Failed
	// Inconclusive: the call said nothing of the service's health (a
	// call that timed out because of its own cost), which a probe still
	// counts as failed.
	Inconclusive
	// Unsent: the call never reached the service, or its caller gave up
	// on it: a probe's turn passes to the next call, at once.
	Unsent
)

// Ticket is a call's leave from Allow; its outcome goes back through
// Report, whatever it is.
type Ticket struct {
	started int64  // when it was let through
	probe   uint64 // the probe's number; 0: not a probe
}

// Observer hears each change of a Breaker: the circuit opening, a failed
// probe (which leaves it open), the circuit closing. It is called with the
// breaker's lock held, so in order; it must not call the breaker.
type Observer interface {
	// Opened: failures in a row (err the last) opened the circuit; the
	// first probe goes after retryIn.
	Opened(err error, failures int, retryIn time.Duration)
	// ProbeFailed: a probe failed (why), the circuit stays open; the next
	// probe goes after retryIn.
	ProbeFailed(why string, failures int, retryIn time.Duration)
	// Closed: a call succeeded, the circuit had been open for openFor.
	Closed(openFor time.Duration)
}

// Breaker is closed (calls go through), open (calls fail at once, for a
// backoff with jitter) or half-open (one probe call goes through; success
// closes, failure reopens with twice the backoff; a probe that never
// reached the service hands its turn to the next call; one not reported
// within ProbeTimeout failed). Instants are readings of its clock. It is
// safe for concurrent use.
type Breaker struct {
	opts    Options
	window  time.Duration
	obs     Observer
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

// New returns a closed Breaker on clk that tells obs of its changes; o
// must be checked.
func New(o Options, clk clock.Clock, obs Observer) *Breaker {
	if o.Failures <= 0 {
		o.Failures = 3
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
	window := 200 * time.Millisecond
	if o.Window != nil {
		window = *o.Window
	}
	// No failure was counted yet: every call started after "the last".
	return &Breaker{opts: o, window: window, obs: obs, clk: clk, counted: math.MinInt64}
}

// Allow reports whether a call may go now and, when it may, the ticket
// its outcome is reported with.
func (b *Breaker) Allow() (Ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	if !b.open {
		return Ticket{started: now}, true
	}
	b.expire(now)
	if b.probe != 0 || now < b.until {
		return Ticket{}, false
	}
	b.probes++
	b.probe, b.probeBy = b.probes, now+int64(b.opts.ProbeTimeout)
	return Ticket{started: now, probe: b.probe}, true
}

// Report is told what became of the call t let through; err is its error
// (nil when it succeeded).
func (b *Breaker) Report(t Ticket, o Outcome, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.expire(now)
	probe := t.probe != 0 && t.probe == b.probe
	switch {
	case o == Succeeded:
		b.closeLocked(now)
	case probe && o == Unsent:
		// Neither way: the next call probes at once.
		b.probe, b.until = 0, now
	case probe:
		b.probeFailed(now, err.Error())
	case t.probe != 0 || o != Failed:
		// A probe already given up on, or nothing learnt.
	case t.started >= b.counted:
		b.countFailure(now, err)
	}
}

// expire fails the probe out if its ProbeTimeout has passed by now, at
// its deadline, when its backoff starts (as it would have had a call come
// then); its report, if it comes, is then a stale probe's.
func (b *Breaker) expire(now int64) {
	if b.probe != 0 && now >= b.probeBy {
		b.probeFailed(b.probeBy, "probe not reported within its timeout")
	}
}

func (b *Breaker) closeLocked(now int64) {
	b.fails = 0
	if b.open {
		b.open, b.probe, b.backoff = false, 0, 0
		b.obs.Closed(time.Duration(now - b.since))
	}
}

// countFailure counts a failure of a closed circuit's call, and opens the
// circuit after enough of them over the window.
func (b *Breaker) countFailure(now int64, err error) {
	b.counted = now
	if b.fails == 0 {
		b.first = now
	}
	b.fails++
	if b.open || b.fails < b.opts.Failures || time.Duration(now-b.first) < b.window {
		return
	}
	b.open, b.backoff, b.since = true, b.opts.MinBackoff, now
	b.obs.Opened(err, b.fails, b.backOff(now))
}

// probeFailed reopens the circuit for twice the backoff.
func (b *Breaker) probeFailed(now int64, why string) {
	b.probe, b.counted = 0, now
	b.fails++
	b.backoff = min(2*b.backoff, b.opts.MaxBackoff)
	b.obs.ProbeFailed(why, b.fails, b.backOff(now))
}

// backOff starts a backoff at now, with up to a quarter of jitter so that
// replicas do not probe in step, and returns its length.
func (b *Breaker) backOff(now int64) time.Duration {
	d := b.backoff + time.Duration(rand.Int64N(int64(b.backoff)/4+1))
	b.until = now + int64(d)
	return d
}

// Reachable is told that the service answers (a successful ping, say):
// the next call may probe at once.
func (b *Breaker) Reachable() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.expire(now)
	if b.open && b.probe == 0 {
		b.until = now
	}
}

// OpenFor reports whether the circuit is open and, if so, for how long.
func (b *Breaker) OpenFor() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.clk.Now() - b.since), b.open
}
