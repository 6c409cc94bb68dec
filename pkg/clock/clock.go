// Package clock is the one place tokengate reads time. Everything else takes
// a Clock, so tests step through fixed instants and never sleep.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock reads monotonic time in nanoseconds. Readings are only comparable
// with readings of the same Clock. Implementations are safe for concurrent
// use.
type Clock interface {
	Now() int64
}

// Monotonic reads the process's monotonic clock: nanoseconds since it was
// created, unaffected by wall-clock steps.
type Monotonic struct{ start time.Time }

// NewMonotonic starts a monotonic clock at 0.
func NewMonotonic() *Monotonic { return &Monotonic{start: time.Now()} }

// Now returns the nanoseconds since the clock was created.
func (m *Monotonic) Now() int64 { return int64(time.Since(m.start)) }

// Fake is a Clock that moves only when told to. The zero Fake reads 0.
type Fake struct{ ns atomic.Int64 }

// Now returns the fake instant.
func (f *Fake) Now() int64 { return f.ns.Load() }

// Set moves the fake clock to ns, backwards or forwards.
func (f *Fake) Set(ns int64) { f.ns.Store(ns) }

// Add moves the fake clock by d and returns the new instant.
func (f *Fake) Add(d time.Duration) int64 { return f.ns.Add(int64(d)) }

// Anchor maps a Clock's readings onto the wall clock, fixed once: the
// wall time of reading 0. Calendar budgets find their periods through it,
// so no decision reads the wall clock, and a step of the wall clock after
// the anchor was taken moves no boundary. The zero Anchor maps reading 0
// to the Unix epoch. It is a value: safe for concurrent use.
type Anchor struct{ unixNano int64 }

// AnchorAt is the anchor under which reading is the wall time wall.
func AnchorAt(wall time.Time, reading int64) Anchor {
	return Anchor{wall.UnixNano() - reading}
}

// Wall is the wall time of reading ns, in Unix nanoseconds.
func (a Anchor) Wall(ns int64) int64 { return a.unixNano + ns }

// Reading is the reading of the wall time unixNano.
func (a Anchor) Reading(unixNano int64) int64 { return unixNano - a.unixNano }

// Anchor is m's anchor: the wall clock read once, when m was created.
func (m *Monotonic) Anchor() Anchor { return Anchor{m.start.UnixNano()} }
