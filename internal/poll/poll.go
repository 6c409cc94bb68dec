// Package poll waits, in tests and test harnesses, for a condition that
// another process or goroutine makes true with no event to wait on: a
// reload served, a metric moved, a server answering. It is the one
// polling loop; a test that can wait on a channel or step a clock.Fake
// does that instead.
//
// It reads the wall clock and sleeps, which is what polling a real
// process takes. Functions are safe for concurrent use; a condition is
// called from the caller's goroutine only.
package poll

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is the time between two calls of a condition.
const Interval = 10 * time.Millisecond

// Cond is a condition: a func() bool holds when it returns true, a
// func() error when it returns nil (its last error says why it did not).
type Cond interface {
	func() bool | func() error
}

// Until calls cond every Interval until it holds and returns nil, or
// returns an error (wrapping cond's last error, if it returns one) once
// timeout has passed. cond is called at least once, even with a timeout
// of 0.
func Until[C Cond](timeout time.Duration, cond C) error {
	check := asError(cond)
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		switch {
		case err == nil:
			return nil
		case time.Now().Before(deadline):
			time.Sleep(Interval)
		case err == errFalse:
			return fmt.Errorf("not within %v", timeout)
		default:
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
	}
}

// Eventually is Until for a test: it fails t, saying it was waiting for
// msg, when cond does not hold within timeout.
func Eventually[C Cond](t testing.TB, timeout time.Duration, cond C, msg string) {
	t.Helper()
	if err := Until(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", msg, err)
	}
}

// errFalse stands for a func() bool that returned false.
var errFalse = errors.New("false")

func asError[C Cond](cond C) func() error {
	switch c := any(cond).(type) {
	case func() bool:
		return func() error {
			if c() {
				return nil
			}
			return errFalse
		}
	case func() error:
		return c
	}
	panic("unreachable: a Cond is a func() bool or a func() error")
}
