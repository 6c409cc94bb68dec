package logbudget

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Budget lets at most per lines through an interval; see the package
// comment. Build one with New.
type Budget struct {
	per     int64
	every   int64                  // ns an interval lasts
	current atomic.Pointer[window] // nil before the first line
	dropped atomic.Int64           // since the last line let through
}

// window is one interval: it ends at end and has let taken lines claim a
// place, those beyond per dropped. A new interval is a new window, so
// claims on an old one (a reading taken just before it ended) never count
// in the new one.
type window struct {
	end   int64
	taken atomic.Int64
}

// New returns a Budget of per lines (at least one) every interval. The
// first line always goes through, whatever its instant.
func New(per int, every time.Duration) *Budget {
	return &Budget{per: int64(max(per, 1)), every: int64(every)}
}

// Take reports whether a line may go out at now and, if so, how many were
// dropped since the last line that did; a line it refuses is dropped.
func (b *Budget) Take(now int64) (dropped int64, ok bool) {
	if !b.claim(now) {
		b.dropped.Add(1)
		return 0, false
	}
	return b.dropped.Swap(0), true
}

// Flush is Take for a line that only reports the lines dropped (a "back
// to normal" line): it lets one through when some were dropped and the
// budget has room, and drops nothing when it refuses.
func (b *Budget) Flush(now int64) (dropped int64, ok bool) {
	if b.dropped.Load() == 0 || !b.claim(now) {
		return 0, false
	}
	return b.dropped.Swap(0), true
}

// claim takes a place in the interval now is in, starting a new interval
// at now when the last one has ended. The clock is monotonic, so now does
// not move back; now+every overflows only some 290 years after the clock
// started.
func (b *Budget) claim(now int64) bool {
	for {
		w := b.current.Load()
		if w != nil && now < w.end {
			// Loaded first so that a flood of dropped lines only reads
			// the shared window.
			return w.taken.Load() < b.per && w.taken.Add(1) <= b.per
		}
		next := &window{end: now + b.every}
		next.taken.Store(1)
		if b.current.CompareAndSwap(w, next) {
			return true
		}
	}
}

// Dropped is the attribute with which a line let through says how many
// were dropped before it ("dropped"): an empty attribute, which slog's
// handlers leave out, when none were.
func Dropped(n int64) slog.Attr {
	if n == 0 {
		return slog.Attr{}
	}
	return slog.Int64("dropped", n)
}
