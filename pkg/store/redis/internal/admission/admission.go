package admission

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options bound the work one Gate has in flight; zero fields take the
// defaults in brackets, but Budget, which can turn admission off, is set
// by a pointer: nil for the default, a pointer to 0 for off.
type Options struct {
	// Budget is the most items (buckets) of all requests in flight [nil:
	// 512]; 0 turns admission off.
	Budget *int
	// HeavyShare is the fraction of Budget that heavy requests may hold
	// together, in (0, 1] [0.5]. At 1 light requests have no reserve.
	HeavyShare float64
	// Light is the most items of a light request [8]; more is heavy. Eight
	// covers the descriptors an Envoy route usually sends (a user, a path,
	// a tenant, an address...); a heavy request is a flood's shape.
	Light int
	// Wait is the longest a request waits to be admitted [half of the
	// timeout New is given]; the call then has the rest of the timeout.
	Wait time.Duration
}

// Check says what is wrong with o, nil when nothing is.
func (o Options) Check() error {
	if o.Budget != nil && *o.Budget < 0 {
		return fmt.Errorf("admission: budget %d: want a number of items, or 0 for off", *o.Budget)
	}
	if o.HeavyShare < 0 || o.HeavyShare > 1 || math.IsNaN(o.HeavyShare) || o.Light < 0 || o.Wait < 0 {
		return fmt.Errorf("admission: heavy share %v (want a fraction in (0, 1], 0 for the default), light %d, wait %v (want >= 0)", o.HeavyShare, o.Light, o.Wait)
	}
	return nil
}

type class int

const (
	light class = iota
	heavy
)

// Gate is the bound. A nil *Gate admits everything at once. It is safe
// for concurrent use.
type Gate struct {
	budget, heavyCap, light int
	wait                    time.Duration

	mu       sync.Mutex
	inFlight [2]int       // items admitted and not released, by class
	waiting  [2]list.List // of *waiter, by class, oldest first
	gauges   [2]prometheus.Gauge

	waits func(class) // tests: told when a request starts to wait
}

// waiter is a request waiting for room; ready is closed when it is
// admitted (under mu).
type waiter struct {
	w     int
	ready chan struct{}
}

// New returns the gate for o (checked), or nil when its Budget is 0;
// timeout is the callers' deadline, of which o.Wait defaults to half.
// lightGauge and heavyGauge are set to the items in flight of each class.
func New(o Options, timeout time.Duration, lightGauge, heavyGauge prometheus.Gauge) *Gate {
	budget := 512
	if o.Budget != nil {
		budget = *o.Budget
	}
	if budget == 0 {
		return nil
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
	return &Gate{budget: budget, light: o.Light, wait: o.Wait, heavyCap: max(1, int(float64(budget)*o.HeavyShare)),
		gauges: [2]prometheus.Gauge{lightGauge, heavyGauge}}
}

// IsHeavy reports whether a request of n items is heavy; a nil Gate (off)
// takes none as heavy.
func (g *Gate) IsHeavy(n int) bool { return g != nil && n > g.light }

// weigh returns the class of a request of n items and the weight it is
// admitted with: n, capped at what its class may ever hold.
func (g *Gate) weigh(n int) (class, int) {
	if n <= g.light {
		return light, min(n, g.budget)
	}
	return heavy, min(n, g.heavyCap)
}

// fits reports whether w more items of class c may go now (mu held).
func (g *Gate) fits(c class, w int) bool {
	if g.inFlight[light]+g.inFlight[heavy]+w > g.budget {
		return false
	}
	return c == light || g.inFlight[heavy]+w <= g.heavyCap
}

// add changes class c's items in flight by d, never below zero (mu held).
func (g *Gate) add(c class, d int) {
	g.inFlight[c] = max(g.inFlight[c]+d, 0)
	g.gauges[c].Set(float64(g.inFlight[c]))
}

// Acquire waits until a request of n items is admitted, or until ctx ends
// or it has waited Options.Wait; then it returns the context's error and
// holds nothing. Every nil return must be followed by one Release(n).
func (g *Gate) Acquire(ctx context.Context, n int) error {
	if g == nil {
		return nil
	}
	c, w := g.weigh(n)
	g.mu.Lock()
	if g.waiting[c].Len() == 0 && g.fits(c, w) {
		g.add(c, w)
		g.mu.Unlock()
		return nil
	}
	wt := &waiter{w: w, ready: make(chan struct{})}
	e := g.waiting[c].PushBack(wt)
	g.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, g.wait)
	defer cancel()
	if g.waits != nil {
		g.waits(c)
	}
	select {
	case <-wt.ready:
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-wt.ready:
		// Admitted as ctx ended: a call now would only fail, and count as
		// a timeout; give the room back instead.
		g.add(c, -w)
	default:
		g.waiting[c].Remove(e)
	}
	// Either way the room may now fit the waiters behind it.
	g.admitWaiting()
	return ctx.Err()
}

// Release returns the room of a request of n items that Acquire admitted.
func (g *Gate) Release(n int) {
	if g == nil {
		return
	}
	c, w := g.weigh(n)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.add(c, -w)
	g.admitWaiting()
}

// admitWaiting lets in, oldest first, light waiters and then heavy ones,
// while the first of each class fits (mu held).
func (g *Gate) admitWaiting() {
	for c := range g.waiting {
		q := &g.waiting[c]
		for e := q.Front(); e != nil && g.fits(class(c), e.Value.(*waiter).w); e = q.Front() {
			wt := q.Remove(e).(*waiter)
			g.add(class(c), wt.w)
			close(wt.ready)
		}
	}
}
