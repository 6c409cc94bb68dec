package service

import (
	"math"
	"sync/atomic"
	"time"
)

// logEvery lets one log line through per interval and counts the lines it
// holds back, so that a failure on every request (a store outage at tens
// of thousands of requests a second) becomes one line per interval saying
// how many it stands for. Instants are a clock.Clock's nanoseconds.
//
// It is safe for concurrent use and takes no lock: a held-back line costs
// one atomic add, and a caller with nothing held back one atomic load.
// Totals are exact; a line may count a line held back at the same instant
// by another goroutine that, strictly, came after it.
type logEvery struct {
	every int64        // ns between two lines
	next  atomic.Int64 // earliest instant of the next line
	held  atomic.Int64 // lines held back since the last one let through
}

func newLogEvery(every time.Duration) *logEvery {
	l := &logEvery{every: int64(every)}
	l.next.Store(math.MinInt64) // the first line always goes through
	return l
}

// allow reports whether a line may be logged at now and, if so, how many
// were held back since the last line; a line it refuses is held back.
func (l *logEvery) allow(now int64) (held int64, ok bool) {
	if !l.take(now) {
		l.held.Add(1)
		return 0, false
	}
	return l.held.Swap(0), true
}

// flush is allow for a line that only reports the lines held back: it
// lets one through when some are held back and the interval has passed,
// and counts nothing when it refuses.
func (l *logEvery) flush(now int64) (held int64, ok bool) {
	if l.held.Load() == 0 || !l.take(now) {
		return 0, false
	}
	return l.held.Swap(0), true
}

// take claims the line of the interval that now is in, if it is free.
// The clock is monotonic, so now does not move back; now+every overflows
// only some 290 years after the clock started.
func (l *logEvery) take(now int64) bool {
	next := l.next.Load()
	return now >= next && l.next.CompareAndSwap(next, now+l.every)
}
