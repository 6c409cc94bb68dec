package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestUntil: a condition that holds returns at once, one that comes to
// hold after some calls returns then, and one that never holds returns an
// error with its last error, after at least one call whatever the timeout.
func TestUntil(t *testing.T) {
	t.Run("holds at once", func(t *testing.T) {
		calls := 0
		if err := Until(0, func() bool { calls++; return true }); err != nil || calls != 1 {
			t.Fatalf("%v after %d calls", err, calls)
		}
	})
	t.Run("holds on the third call", func(t *testing.T) {
		calls := 0
		if err := Until(testTimeout, func() bool { calls++; return calls == 3 }); err != nil || calls != 3 {
			t.Fatalf("%v after %d calls", err, calls)
		}
	})
	t.Run("an error until it holds", func(t *testing.T) {
		calls := 0
		err := Until(testTimeout, func() error {
			if calls++; calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("%v after %d calls", err, calls)
		}
	})
	t.Run("never: false", func(t *testing.T) {
		calls := 0
		err := Until(0, func() bool { calls++; return false })
		if err == nil || err.Error() != "not within 0s" || calls != 1 {
			t.Fatalf("%v after %d calls", err, calls)
		}
	})
	t.Run("never: the last error", func(t *testing.T) {
		last := errors.New("connection refused")
		err := Until(2*Interval, func() error { return last })
		if !errors.Is(err, last) || !strings.HasPrefix(err.Error(), "not within 20ms: ") {
			t.Fatalf("got %v", err)
		}
	})
}

// testTimeout is far beyond what the conditions above take.
const testTimeout = 10 * time.Second

// fatalT records Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

// TestEventually: a condition that holds fails nothing; one that does
// not fails the test, naming what it waited for and why.
func TestEventually(t *testing.T) {
	f := &fatalT{TB: t}
	Eventually(f, 0, func() bool { return true }, "ok")
	if f.msg != "" {
		t.Fatalf("a condition that holds failed the test: %s", f.msg)
	}
	Eventually(f, 0, func() error { return errors.New("502") }, "the proxy")
	if want := "waiting for the proxy: not within 0s: 502"; f.msg != want {
		t.Fatalf("got %q, want %q", f.msg, want)
	}
}
