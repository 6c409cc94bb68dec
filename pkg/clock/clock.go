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
