package watch

import (
	"testing"
	"time"
)

// TestDebounce: each event of a burst pushes the reload back, until the
// burst's first event is ten waits old; after the reload the next event
// starts a new burst. Time is a list of instants, not a sleep.
func TestDebounce(t *testing.T) {
	const ms = int64(time.Millisecond)
	d := debounce{wait: 100 * time.Millisecond}
	for _, step := range []struct {
		at         int64
		reschedule bool
	}{
		{0, true},                        // the first event schedules
		{50 * ms, true},                  // pushes it back
		{999 * ms, true},                 // still within ten waits of the first
		{1000 * ms, false},               // ten waits: no more pushing
		{5000 * ms, false},               // however long the stream goes on
		{-time.Hour.Nanoseconds(), true}, // a clock behind the first: no time passed
	} {
		if got := d.event(step.at); got != step.reschedule {
			t.Fatalf("event at %v: reschedule %v, want %v", time.Duration(step.at), got, step.reschedule)
		}
	}
	if !d.pending {
		t.Fatal("no reload pending after a burst")
	}
	d.fired()
	if d.pending || !d.event(6000*ms) || d.event(7000*ms) {
		t.Fatal("after the reload an event starts a new burst, ten waits long")
	}
}
