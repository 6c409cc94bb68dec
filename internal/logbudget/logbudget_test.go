package logbudget

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBudget: per lines an interval, the interval starting at its first
// line, each line let through with the number dropped since the one
// before; Flush reports what was dropped without dropping anything itself.
func TestBudget(t *testing.T) {
	const s = int64(time.Second)
	type step struct {
		flush       bool
		at          int64
		wantOK      bool
		wantDropped int64
	}
	for _, tc := range []struct {
		name  string
		per   int
		steps []step
	}{
		{"first line at once, even at a negative instant", 1, []step{
			{at: -5 * s, wantOK: true},
			{at: -5 * s},
			{at: 5 * s, wantOK: true, wantDropped: 1},
		}},
		{"dropped within the interval, counted on the next", 1, []step{
			{at: 0, wantOK: true},
			{at: 1},
			{at: 9 * s},
			{at: 10*s - 1},
			{at: 10 * s, wantOK: true, wantDropped: 3},
			{at: 11 * s},
			{at: 30 * s, wantOK: true, wantDropped: 1},
		}},
		{"the interval runs from its first line, not from a grid", 1, []step{
			{at: 0, wantOK: true},
			{at: 25 * s, wantOK: true},
			{at: 34 * s},
			{at: 35 * s, wantOK: true, wantDropped: 1},
		}},
		{"per lines an interval", 3, []step{
			{at: 5 * s, wantOK: true},
			{at: 6 * s, wantOK: true},
			{at: 14 * s, wantOK: true},
			{at: 14 * s},
			{at: 15*s - 1},
			{at: 15 * s, wantOK: true, wantDropped: 2},
			{at: 15 * s, wantOK: true},
			{at: 15 * s, wantOK: true},
			{at: 16 * s},
		}},
		{"below one line is one", 0, []step{
			{at: 0, wantOK: true},
			{at: 0},
			{at: 10 * s, wantOK: true, wantDropped: 1},
		}},
		{"flush: nothing dropped, nothing to say", 1, []step{
			{flush: true, at: 0},
			{at: 0, wantOK: true},
			{flush: true, at: 20 * s},
			{at: 20 * s, wantOK: true},
		}},
		{"flush: waits for room, drops nothing", 1, []step{
			{at: 0, wantOK: true},
			{at: 1 * s},
			{at: 2 * s},
			{flush: true, at: 5 * s},
			{flush: true, at: 9 * s},
			{flush: true, at: 10 * s, wantOK: true, wantDropped: 2},
			{flush: true, at: 30 * s},
			{at: 30 * s, wantOK: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.per, 10*time.Second)
			for i, st := range tc.steps {
				op, f := "Take", b.Take
				if st.flush {
					op, f = "Flush", b.Flush
				}
				if dropped, ok := f(st.at); ok != st.wantOK || dropped != st.wantDropped {
					t.Fatalf("step %d: %s(%d) = %d, %v; want %d, %v", i, op, st.at, dropped, ok, st.wantDropped, st.wantOK)
				}
			}
		})
	}
}

// TestBudgetConcurrent: of many lines at one instant exactly per go
// through, and every other line is counted once: by a line let through
// after it (a winner that swaps the count after others have dropped) or
// by the first line of the next interval.
func TestBudgetConcurrent(t *testing.T) {
	for _, per := range []int{1, 50} {
		b := New(per, time.Second)
		var through, reported atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 500 {
					if dropped, ok := b.Take(int64(100 * time.Millisecond)); ok {
						through.Add(1)
						reported.Add(dropped)
					}
				}
			})
		}
		wg.Wait()
		if through.Load() != int64(per) {
			t.Fatalf("per %d: %d lines through in one interval", per, through.Load())
		}
		total := int64(8*500 - per)
		if dropped, ok := b.Flush(int64(1100 * time.Millisecond)); reported.Load()+dropped != total || ok != (dropped > 0) {
			t.Fatalf("per %d: lines through reported %d dropped, the flush in the next interval %d, %v; want %d in all",
				per, reported.Load(), dropped, ok, total)
		}
	}
}
