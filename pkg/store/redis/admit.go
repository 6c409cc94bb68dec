package redis

// Admission: a per-replica bound on the Redis work in flight, weighted by
// buckets.
//
// Redis runs one script at a time, and a decision's script costs Redis CPU
// in proportion to its buckets (a few µs each). Unbounded, one client's
// flood of 64-bucket requests queues so much work ahead of everyone else's
// one-bucket requests that they pass Options.Timeout: on_store_error
// answers them and the breaker opens, though Redis is up. So every Decide
// is admitted before its call, its weight being its item count:
//
//   - all admitted requests together hold at most Budget items;
//   - heavy ones (more than Light items) together hold at most
//     HeavyShare of Budget, so the rest is always there for light ones:
//     they wait only behind other light work, never behind a heavy flood;
//   - a request that does not fit waits, in FIFO order within its class,
//     until it fits, its context ends (the call's context, with the
//     store's timeout) or it has waited Wait (half the timeout). One not
//     admitted is shed: an error wrapping store.ErrUnavailable, counted as
//     reason "shed", and no breaker failure (the client is expensive, Redis
//     is not down). Wait leaves an admitted call the rest of the timeout:
//     one admitted just before its deadline would time out in Redis and
//     count as Redis failing.
//
// A light request fits when the total has room, a heavy one when the total
// and the heavy share both have room; when room frees, light waiters are
// let in first. A heavy request of more items than the heavy share (only
// with a small Budget) weighs the whole share, so it runs alone among
// heavy ones instead of never.

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/store"
)

// AdmissionOptions bound the Redis work one Store (one replica) has in
// flight; zero fields take the defaults in brackets. The bound is per
// replica: with many replicas on one Redis, Budget times replicas times
// the per-bucket cost (3-6 µs) should stay well under Options.Timeout.
type AdmissionOptions struct {
	// Budget is the most items (buckets) of all requests in flight [512];
	// below zero, admission is off.
	Budget int
	// HeavyShare is the fraction of Budget that heavy requests may hold
	// together, in (0, 1] [0.5]. At 1 light requests have no reserve.
	HeavyShare float64
	// Light is the most items of a light request [8]; more is heavy. Eight
	// covers the descriptors an Envoy route usually sends (a user, a path,
	// a tenant, an address...); a heavy request is a flood's shape.
	Light int
	// Wait is the longest a request waits to be admitted [half of
	// Options.Timeout]; the call then has the rest of the timeout.
	Wait time.Duration
}

func (o AdmissionOptions) check() error {
	if o.HeavyShare < 0 || o.HeavyShare > 1 || math.IsNaN(o.HeavyShare) || o.Light < 0 || o.Wait < 0 {
		return fmt.Errorf("redis: admission: heavy share %v (want a fraction in (0, 1], 0 for the default), light %d, wait %v (want >= 0)", o.HeavyShare, o.Light, o.Wait)
	}
	return nil
}

type class int

const (
	light class = iota
	heavy
)

// admission is the gate. A nil *admission admits everything at once. It is
// safe for concurrent use.
type admission struct {
	budget, heavyCap, light int
	wait                    time.Duration

	mu       sync.Mutex
	inFlight [2]int       // items admitted and not released, by class
	waiting  [2]list.List // of *waiter, by class, oldest first
	gauges   [2]prometheus.Gauge

	queued func(class) // tests: told when a request starts to wait
}

// waiter is a request waiting for room; ready is closed when it is
// admitted (under mu).
type waiter struct {
	w     int
	ready chan struct{}
}

// newAdmission returns the gate for o (checked), or nil when o.Budget < 0;
// timeout is the store's, of which o.Wait defaults to half. gauges is set
// to the items in flight by class.
func newAdmission(o AdmissionOptions, timeout time.Duration, gauges *prometheus.GaugeVec) *admission {
	if o.Budget < 0 {
		return nil
	}
	if o.Budget == 0 {
		o.Budget = 512
	}
	if o.HeavyShare == 0 {
		o.HeavyShare = 0.5
	}
	if o.Light == 0 {
		o.Light = 8
	}
	if o.Wait == 0 {
		o.Wait = timeout / 2
	}
	a := &admission{budget: o.Budget, light: o.Light, wait: o.Wait, heavyCap: max(1, int(float64(o.Budget)*o.HeavyShare))}
	a.gauges = [2]prometheus.Gauge{gauges.WithLabelValues("light"), gauges.WithLabelValues("heavy")}
	return a
}

// isHeavy reports whether a request of n items is heavy; a nil admission
// (off) takes none as heavy.
func (a *admission) isHeavy(n int) bool { return a != nil && n > a.light }

// weigh returns the class of a request of n items and the weight it is
// admitted with: n, capped at what its class may ever hold.
func (a *admission) weigh(n int) (class, int) {
	if n <= a.light {
		return light, min(n, a.budget)
	}
	return heavy, min(n, a.heavyCap)
}

// fits reports whether w more items of class c may go now (mu held).
func (a *admission) fits(c class, w int) bool {
	if a.inFlight[light]+a.inFlight[heavy]+w > a.budget {
		return false
	}
	return c == light || a.inFlight[heavy]+w <= a.heavyCap
}

// add changes class c's items in flight by d, never below zero (mu held).
func (a *admission) add(c class, d int) {
	a.inFlight[c] = max(a.inFlight[c]+d, 0)
	a.gauges[c].Set(float64(a.inFlight[c]))
}

// acquire waits until a request of n items is admitted, or until ctx ends
// or it has waited a.wait; then it returns the context's error and holds
// nothing. Every nil return must be followed by one release(n).
func (a *admission) acquire(ctx context.Context, n int) error {
	if a == nil {
		return nil
	}
	c, w := a.weigh(n)
	a.mu.Lock()
	if a.waiting[c].Len() == 0 && a.fits(c, w) {
		a.add(c, w)
		a.mu.Unlock()
		return nil
	}
	wt := &waiter{w: w, ready: make(chan struct{})}
	e := a.waiting[c].PushBack(wt)
	a.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	if a.queued != nil {
		a.queued(c)
	}
	select {
	case <-wt.ready:
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-wt.ready:
		// Admitted as ctx ended: a call now would only fail, and count as
		// a timeout; give the room back instead.
		a.add(c, -w)
	default:
		a.waiting[c].Remove(e)
	}
	// Either way the room may now fit the waiters behind it.
	a.admitWaiting()
	return ctx.Err()
}

// release returns the room of a request of n items that acquire admitted.
func (a *admission) release(n int) {
	if a == nil {
		return
	}
	c, w := a.weigh(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.add(c, -w)
	a.admitWaiting()
}

// admitWaiting lets in, oldest first, light waiters and then heavy ones,
// while the first of each class fits (mu held).
func (a *admission) admitWaiting() {
	for c := range a.waiting {
		q := &a.waiting[c]
		for e := q.Front(); e != nil && a.fits(class(c), e.Value.(*waiter).w); e = q.Front() {
			wt := q.Remove(e).(*waiter)
			a.add(class(c), wt.w)
			close(wt.ready)
		}
	}
}

// shed is Decide's error for a request of n items that was not admitted
// (err is from acquire), counted as "shed" unless the caller gave up. It
// is not a breaker failure: Redis did not fail, it was kept from overload.
func (s *Store) shed(ctx context.Context, n int, err error) error {
	if ctx.Err() == nil {
		s.metrics.errors.WithLabelValues("shed").Inc()
	}
	return fmt.Errorf("redis: %w: shed: no room for %d items among the work in flight: %w", store.ErrUnavailable, n, err)
}
