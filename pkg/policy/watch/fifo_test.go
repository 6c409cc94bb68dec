package watch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// mkfifo makes a named pipe at path. Until the test ends, a reader blocked
// on it is released (a writer opens and closes it), so that a watcher
// that does block fails its test instead of hanging the package.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// within runs f and fails the test if it has not returned in 5 s.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked on a named pipe", what)
		panic("unreachable")
	}
}

func TestNewRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "policy.yaml")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, link} {
		err := within(t, "New", func() error {
			_, err := New(Options{Path: path, Clock: new(clock.Fake)})
			return err
		})
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") || FailureReason(err) != ReasonNotRegular {
			t.Fatalf("New(%s): %v", filepath.Base(path), err)
		}
	}
	// A directory is a set of policy files: its pipe is refused the same.
	if err := within(t, "New", func() error { _, err := New(Options{Path: dir, Clock: new(clock.Fake)}); return err }); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
		t.Fatalf("New(directory): %v", err)
	}
}

// TestNamedPipeKeepsLastGood: a pipe renamed over the policy file is
// refused without being read, logged and reported as not_regular_file, and
// the watcher goes on to load the next good file.
func TestNamedPipeKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write(t, path, policyFile(1))
	f := start(t, path, -1)
	good := f.w.Current()

	fifo := filepath.Join(dir, ".policy.fifo")
	mkfifo(t, fifo)
	t.Cleanup(func() { // release a watcher blocked on the pipe under its new name
		if p, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			p.Close()
		}
	})
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	f.waitFailure(t, "read policy: open "+path+": not a regular file (named pipe)")
	if err := within(t, "Reload", f.w.Reload); err != nil {
		t.Fatalf("Reload of the same pipe: %v, want nil (reported once)", err)
	}
	if f.w.Current() != good {
		t.Fatal("the pipe replaced the policy")
	}
	if logs := f.logs.String(); !strings.Contains(logs, "policy refused") || !strings.Contains(logs, "named pipe") {
		t.Fatalf("log:\n%s", logs)
	}

	write(t, filepath.Join(dir, ".policy.tmp"), policyFile(2))
	if err := os.Rename(filepath.Join(dir, ".policy.tmp"), path); err != nil {
		t.Fatal(err)
	}
	f.waitRevision(t, 2)
}

func TestFailureReason(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	write(t, bad, badFile)
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "missing.yaml"), ReasonRead},
		{"invalid", bad, ReasonInvalid},
		{"named pipe", fifo, ReasonNotRegular},
		{"directory with a bad file", dir, ReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := within(t, "New", func() error {
				_, err := New(Options{Path: tc.path, Clock: new(clock.Fake), OnReload: func(r Result, _ *policy.Policy, err error) {
					got = append(got, string(r)+" "+FailureReason(err))
				}})
				return err
			})
			if err == nil || len(got) != 1 || got[0] != "failure "+tc.want {
				t.Fatalf("New: %v; hook heard %v, want [failure %s]", err, got, tc.want)
			}
		})
	}
}
