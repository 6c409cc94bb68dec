package service

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLogEvery: one line per interval, each with the number held back
// since the one before; flush reports what is held back without holding
// back anything itself.
func TestLogEvery(t *testing.T) {
	const s = int64(time.Second)
	type step struct {
		flush    bool
		at       int64
		wantOK   bool
		wantHeld int64
	}
	for name, steps := range map[string][]step{
		"first line at once, even at a negative instant": {
			{at: -5 * s, wantOK: true},
			{at: -5 * s},
			{at: 5 * s, wantOK: true, wantHeld: 1},
		},
		"held back within the interval, counted on the next": {
			{at: 0, wantOK: true},
			{at: 1},
			{at: 9 * s},
			{at: 10*s - 1},
			{at: 10 * s, wantOK: true, wantHeld: 3},
			{at: 11 * s},
			{at: 30 * s, wantOK: true, wantHeld: 1},
		},
		"the interval runs from the last line, not from a grid": {
			{at: 0, wantOK: true},
			{at: 25 * s, wantOK: true},
			{at: 34 * s},
			{at: 35 * s, wantOK: true, wantHeld: 1},
		},
		"flush: nothing held back, nothing to say": {
			{flush: true, at: 0},
			{at: 0, wantOK: true},
			{flush: true, at: 20 * s},
			{at: 20 * s, wantOK: true},
		},
		"flush: waits for the interval, holds nothing back": {
			{at: 0, wantOK: true},
			{at: 1 * s},
			{at: 2 * s},
			{flush: true, at: 5 * s},
			{flush: true, at: 9 * s},
			{flush: true, at: 10 * s, wantOK: true, wantHeld: 2},
			{flush: true, at: 30 * s},
			{at: 30 * s, wantOK: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLogEvery(10 * time.Second)
			for i, st := range steps {
				op, f := "allow", l.allow
				if st.flush {
					op, f = "flush", l.flush
				}
				if held, ok := f(st.at); ok != st.wantOK || held != st.wantHeld {
					t.Fatalf("step %d: %s(%d) = %d, %v; want %d, %v", i, op, st.at, held, ok, st.wantHeld, st.wantOK)
				}
			}
		})
	}
}

// TestLogEveryConcurrent: of many lines at one instant one goes through,
// and the next line counts all the others.
func TestLogEveryConcurrent(t *testing.T) {
	l := newLogEvery(time.Second)
	var through atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if _, ok := l.allow(0); ok {
					through.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if through.Load() != 1 {
		t.Fatalf("%d lines through in one interval, want 1", through.Load())
	}
	if held, ok := l.flush(int64(time.Second)); !ok || held != 8*500-1 {
		t.Fatalf("flush after the interval: %d, %v; want %d, true", held, ok, 8*500-1)
	}
}
