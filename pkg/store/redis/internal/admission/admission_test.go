package admission

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/store"
)

// testAdmission returns an admission for o whose Wait defaults to half an
// hour (no test waits for it unless it sets o.Wait), and a channel told
// of each request that starts waiting.
func testAdmission(t *testing.T, o Options) (*Gate, chan class) {
	t.Helper()
	a := New(o, time.Hour, gauge(), gauge())
	queued := make(chan class, 128)
	a.waits = func(c class) { queued <- c }
	return a, queued
}

func gauge() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "in_flight"}) }

// state is the items in flight and the requests waiting, by class.
func (a *Gate) state() (inFlight, waiting [2]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight, [2]int{a.waiting[light].Len(), a.waiting[heavy].Len()}
}

// cancelled is a context that has ended: Acquire with it succeeds only
// when the request is admitted without waiting.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// startWaiting runs Acquire(ctx, n) in a goroutine, returns once it waits
// and delivers its result on the channel.
func startWaiting(t *testing.T, a *Gate, queued <-chan class, ctx context.Context, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- a.Acquire(ctx, n) }()
	select {
	case <-queued:
	case err := <-done:
		t.Fatalf("%d items: acquire returned %v at once, want it to wait", n, err)
	}
	return done
}

// waitResult is a waiter's result; the timer only keeps a broken gate from
// hanging the test.
func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not return within 10s")
		return nil
	}
}

func mustAcquire(t *testing.T, a *Gate, ctx context.Context, n int) {
	t.Helper()
	if err := a.Acquire(ctx, n); err != nil {
		t.Fatalf("acquire %d items: %v", n, err)
	}
}

func wantState(t *testing.T, a *Gate, inFlight, waiting [2]int) {
	t.Helper()
	if f, w := a.state(); f != inFlight || w != waiting {
		t.Fatalf("in flight %v waiting %v, want %v and %v", f, w, inFlight, waiting)
	}
}

// TestAdmitLightWhileHeavyFull: heavy requests hold their whole share and
// more wait; light ones are still admitted at once, up to the budget.
func TestAdmitLightWhileHeavyFull(t *testing.T) {
	a, queued := testAdmission(t, Options{}) // 512 items, 256 heavy, light <= 8
	for range 4 {
		mustAcquire(t, a, context.Background(), 64)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var heavyWaiting []<-chan error
	for range 3 {
		heavyWaiting = append(heavyWaiting, startWaiting(t, a, queued, ctx, 64))
	}
	for i := range 256 / 4 {
		if err := a.Acquire(cancelled(), 1+i%4); err != nil { // 1+2+3+4 per 4 requests: 160 items
			t.Fatalf("light request %d waited behind heavy ones: %v", i, err)
		}
	}
	wantState(t, a, [2]int{160, 256}, [2]int{0, 3})
	// The budget binds light requests too, and room freed goes to the
	// oldest heavy waiter once the heavy share has room.
	for range 96 {
		mustAcquire(t, a, cancelled(), 1)
	}
	if err := a.Acquire(cancelled(), 1); err == nil {
		t.Fatal("a light request was admitted past the budget")
	}
	a.Release(64)
	if err := waitResult(t, heavyWaiting[0]); err != nil {
		t.Fatalf("oldest heavy waiter: %v", err)
	}
	wantState(t, a, [2]int{256, 256}, [2]int{0, 2})
	cancel()
	for _, done := range heavyWaiting[1:] {
		if err := waitResult(t, done); !errors.Is(err, context.Canceled) {
			t.Fatalf("heavy waiter after cancel: %v", err)
		}
	}
	wantState(t, a, [2]int{256, 256}, [2]int{})
}

// TestAdmitHeavyShareUnderConcurrency: goroutines acquire and release at
// random, some with ended contexts; the items held never pass the budget
// nor the heavy share, and everything is given back at the end.
func TestAdmitHeavyShareUnderConcurrency(t *testing.T) {
	a, _ := testAdmission(t, Options{Budget: new(64), HeavyShare: 0.5, Light: 4})
	a.waits = nil
	var held [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				n := 1 + rand.IntN(40)
				ctx := context.Background()
				if (g+i)%3 == 0 {
					ctx = cancelled()
				}
				if a.Acquire(ctx, n) != nil {
					continue
				}
				c, w := a.weigh(n)
				held[c].Add(int64(w))
				if h, l := held[heavy].Load(), held[light].Load(); h > 32 || h+l > 64 {
					t.Errorf("held %d heavy, %d in all: past the share (32) or budget (64)", h, h+l)
				}
				runtime.Gosched()
				held[c].Add(-int64(w))
				a.Release(n)
			}
		}()
	}
	wg.Wait()
	wantState(t, a, [2]int{}, [2]int{})
	for c := range a.gauges {
		if v := testutil.ToFloat64(a.gauges[c]); v != 0 {
			t.Errorf("gauge of class %d is %v at the end", c, v)
		}
	}
}

// TestAdmitInOrder: waiters of a class are admitted oldest first; a
// smaller one behind a waiter that does not fit yet does not go first.
func TestAdmitInOrder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lightMax    int   // Options.Light, of a budget of 8, all of it for heavy ones too
		hold        []int // requests in flight at the start, released one by one
		first, next int   // the two waiters, in this order
		class       class
	}{
		{name: "light", lightMax: 4, hold: []int{1, 1, 1, 1, 1, 1, 1, 1}, first: 3, next: 1, class: light},
		{name: "heavy", lightMax: 1, hold: []int{2, 2, 2, 2}, first: 6, next: 2, class: heavy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, queued := testAdmission(t, Options{Budget: new(8), HeavyShare: 1, Light: tc.lightMax})
			for _, n := range tc.hold {
				mustAcquire(t, a, context.Background(), n)
			}
			first := startWaiting(t, a, queued, context.Background(), tc.first)
			next := startWaiting(t, a, queued, context.Background(), tc.next)
			// Room for next but not first: neither goes, nor a newcomer.
			a.Release(tc.hold[0])
			if _, w := a.state(); w[tc.class] != 2 {
				t.Fatalf("room for the second waiter only: %d waiting, want both", w[tc.class])
			}
			if a.Acquire(cancelled(), tc.next) == nil {
				t.Fatal("a newcomer went before the waiters")
			}
			freed := tc.hold[0]
			for _, n := range tc.hold[1:] {
				if freed >= tc.first {
					break
				}
				a.Release(n)
				freed += n
			}
			if err := waitResult(t, first); err != nil {
				t.Fatal(err)
			}
			if freed-tc.first < tc.next {
				if _, w := a.state(); w[tc.class] != 1 {
					t.Fatalf("after the first waiter: %d waiting, want the second", w[tc.class])
				}
				a.Release(tc.first)
			}
			if err := waitResult(t, next); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAdmitDeadlineWhileWaiting: a waiter whose context ends, or that
// waits Wait, returns the context's error at once and holds nothing; the
// waiters behind it are let in if they now fit.
func TestAdmitDeadlineWhileWaiting(t *testing.T) {
	opts := Options{Budget: new(16), HeavyShare: 0.5, Light: 1} // 8 heavy items
	t.Run("cancelled", func(t *testing.T) {
		a, queued := testAdmission(t, opts)
		mustAcquire(t, a, context.Background(), 8)
		ctx, cancel := context.WithCancel(context.Background())
		done := startWaiting(t, a, queued, ctx, 8)
		cancel()
		if err := waitResult(t, done); !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire after cancel: %v", err)
		}
		wantState(t, a, [2]int{0, 8}, [2]int{})
		a.Release(8)
		wantState(t, a, [2]int{}, [2]int{})
		mustAcquire(t, a, cancelled(), 8)
	})
	t.Run("waited Wait", func(t *testing.T) {
		o := opts
		o.Wait = time.Millisecond
		a, _ := testAdmission(t, o)
		mustAcquire(t, a, context.Background(), 8)
		if err := a.Acquire(context.Background(), 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire past Wait: %v", err)
		}
		wantState(t, a, [2]int{0, 8}, [2]int{})
	})
	t.Run("admitted as it ends", func(t *testing.T) {
		a, _ := testAdmission(t, opts)
		mustAcquire(t, a, context.Background(), 8)
		ctx, cancel := context.WithCancel(context.Background())
		// Cancelled, then admitted, before the waiter looks: it gives the
		// room back.
		a.waits = func(class) { cancel(); a.Release(8) }
		if err := a.Acquire(ctx, 8); !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire admitted after its context ended: %v", err)
		}
		wantState(t, a, [2]int{}, [2]int{})
	})
	t.Run("the head leaves", func(t *testing.T) {
		a, queued := testAdmission(t, opts)
		mustAcquire(t, a, context.Background(), 4)
		mustAcquire(t, a, context.Background(), 4)
		ctx, cancel := context.WithCancel(context.Background())
		head := startWaiting(t, a, queued, ctx, 8)
		behind := startWaiting(t, a, queued, context.Background(), 2)
		a.Release(4) // room for behind, not for head
		wantState(t, a, [2]int{0, 4}, [2]int{0, 2})
		cancel()
		if err := waitResult(t, head); !errors.Is(err, context.Canceled) {
			t.Fatalf("head: %v", err)
		}
		if err := waitResult(t, behind); err != nil {
			t.Fatalf("the waiter behind a cancelled head: %v", err)
		}
		wantState(t, a, [2]int{0, 6}, [2]int{})
	})
}

// TestAdmitReleaseNeverNegative: releases that were never acquired leave
// nothing below zero, and the budget binds as before.
func TestAdmitReleaseNeverNegative(t *testing.T) {
	a, _ := testAdmission(t, Options{Budget: new(16), Light: 4})
	a.Release(1)
	a.Release(64)
	mustAcquire(t, a, context.Background(), 3)
	a.Release(3)
	a.Release(3)
	wantState(t, a, [2]int{}, [2]int{})
	for c := range a.gauges {
		if v := testutil.ToFloat64(a.gauges[c]); v != 0 {
			t.Fatalf("gauge of class %d is %v", c, v)
		}
	}
	for range 4 {
		mustAcquire(t, a, cancelled(), 4)
	}
	if a.Acquire(cancelled(), 1) == nil {
		t.Fatal("stray releases enlarged the budget")
	}
}

// TestAdmitModel: tried without waiting (an ended context), a request is
// admitted exactly when a model of the two counters says it fits.
func TestAdmitModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		budget := rapid.IntRange(1, 64).Draw(rt, "budget")
		share := rapid.Float64Range(0.01, 1).Draw(rt, "share")
		lightMax := rapid.IntRange(1, 8).Draw(rt, "light")
		a := New(Options{Budget: new(budget), HeavyShare: share, Light: lightMax}, time.Hour, gauge(), gauge())
		heavyCap := max(1, int(float64(budget)*share))
		var model [2]int
		var held []int
		for range rapid.IntRange(1, 100).Draw(rt, "ops") {
			if len(held) > 0 && rapid.Bool().Draw(rt, "release") {
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
				n := held[i]
				held = append(held[:i], held[i+1:]...)
				a.Release(n)
				c, w := a.weigh(n)
				model[c] -= w
			} else {
				n := rapid.IntRange(1, store.MaxItems).Draw(rt, "items")
				c, w := light, min(n, budget)
				if n > lightMax {
					c, w = heavy, min(n, heavyCap)
				}
				fits := model[light]+model[heavy]+w <= budget && (c == light || model[heavy]+w <= heavyCap)
				if got := a.Acquire(cancelled(), n) == nil; got != fits {
					rt.Fatalf("%d items with %v in flight (budget %d, heavy %d): admitted %v, want %v", n, model, budget, heavyCap, got, fits)
				}
				if fits {
					model[c] += w
					held = append(held, n)
				}
			}
			if f, w := a.state(); f != model || w != [2]int{} {
				rt.Fatalf("in flight %v waiting %v, model %v", f, w, model)
			}
		}
	})
}

// TestAdmitOptions: defaults, the weight cap of a request bigger than the
// heavy share, turning admission off, and options refused.
func TestAdmitOptions(t *testing.T) {
	a := New(Options{}, 10*time.Millisecond, gauge(), gauge())
	if a.budget != 512 || a.heavyCap != 256 || a.light != 8 || a.wait != 5*time.Millisecond {
		t.Fatalf("defaults: budget %d heavy %d light %d wait %v", a.budget, a.heavyCap, a.light, a.wait)
	}
	a = New(Options{Budget: new(8), HeavyShare: 0.25}, time.Second, gauge(), gauge())
	if c, w := a.weigh(64); c != heavy || w != 2 {
		t.Fatalf("64 items with a heavy share of 2: class %d weight %d", c, w)
	}
	if c, w := a.weigh(4); c != light || w != 4 {
		t.Fatalf("4 items: class %d weight %d", c, w)
	}
	off := New(Options{Budget: new(0)}, time.Second, gauge(), gauge())
	if off != nil {
		t.Fatal("Budget 0 did not turn admission off")
	}
	if err := off.Acquire(cancelled(), 64); err != nil {
		t.Fatalf("admission off: %v", err)
	}
	off.Release(64)
	for _, o := range []Options{{Budget: new(-1)}, {HeavyShare: 1.5}, {HeavyShare: -0.5}, {HeavyShare: math.NaN()}, {Light: -1}, {Wait: -time.Second}} {
		if o.Check() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Options{Budget: new(0), HeavyShare: 1, Light: 64, Wait: time.Second}).Check(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}
