package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// fakeFile is a policy file whose Reload serves next (when not nil) or
// fails with err, and tells the test each time it is called.
type fakeFile struct {
	mu       sync.Mutex
	current  *policy.Policy
	next     *policy.Policy
	err      error
	reloaded chan struct{}
}

var _ policyFile = (*fakeFile)(nil)

func (f *fakeFile) Reload() error {
	f.mu.Lock()
	if f.next != nil {
		f.current, f.next = f.next, nil
	}
	err := f.err
	f.mu.Unlock()
	f.reloaded <- struct{}{}
	return err
}

func (f *fakeFile) Current() *policy.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func compileRevision(t *testing.T, revision string) *policy.Policy {
	t.Helper()
	p, err := new(policy.Compiler).Compile("policy.yaml", []byte("revision: "+revision+"\ndomains: {}\n"), nil, new(clock.Fake).Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReloadOnHangup: each SIGHUP reloads the file once and says so; what
// the reload did is the watcher's to log, except a file left as it was.
func TestReloadOnHangup(t *testing.T) {
	for _, tc := range []struct {
		name string
		file func(*fakeFile) // nil: no policy file
		want []string        // log lines after one SIGHUP, in order
	}{
		{"changed", func(f *fakeFile) { f.next = compileRevision(t, "2") }, []string{
			`msg="SIGHUP: reloading policy"`,
		}},
		{"unchanged", func(*fakeFile) {}, []string{
			`msg="SIGHUP: reloading policy"`,
			`msg="SIGHUP: policy file unchanged since it was last read" serving_revision=1`,
		}},
		{"refused", func(f *fakeFile) { f.err = errors.New("bad") }, []string{
			`msg="SIGHUP: reloading policy"`,
		}},
		{"built-in policy", nil, []string{
			`msg="SIGHUP: no policy file to reload; the policy serving stays"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedLog
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: keepMessage}))
			ff := &fakeFile{current: compileRevision(t, "1"), reloaded: make(chan struct{})}
			var file policyFile
			if tc.file != nil {
				tc.file(ff)
				file = ff
			}
			ctx, cancel := context.WithCancel(context.Background())
			hup := make(chan os.Signal) // unbuffered: a send returns once the signal is taken
			done := make(chan struct{})
			go func() { reloadOnHangup(ctx, hup, file, log); close(done) }()

			hup <- syscall.SIGHUP
			if file != nil {
				<-ff.reloaded
			}
			cancel()
			<-done
			if got, want := strings.TrimSpace(logs.String()), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("logged:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// keepMessage drops the attributes that vary from run to run.
func keepMessage(_ []string, a slog.Attr) slog.Attr {
	switch a.Key {
	case slog.TimeKey, slog.LevelKey, "serving_sha256":
		return slog.Attr{}
	}
	return a
}

// TestHangupReloadsCandidate: SIGHUP re-reads the candidate policy file
// after the live one, and also beside the built-in policy.
func TestHangupReloadsCandidate(t *testing.T) {
	for _, builtin := range []bool{false, true} {
		live := &fakeFile{current: compileRevision(t, "1"), reloaded: make(chan struct{}, 1)}
		cand := &fakeFile{current: compileRevision(t, "7"), next: compileRevision(t, "8"), reloaded: make(chan struct{})}
		var file policyFile = live
		if builtin {
			file = nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		hup := make(chan os.Signal)
		done := make(chan struct{})
		go func() { reloadOnHangup(ctx, hup, file, slog.New(slog.DiscardHandler), cand); close(done) }()
		hup <- syscall.SIGHUP
		<-cand.reloaded
		cancel()
		<-done
		if cand.Current().Revision() != 8 || len(live.reloaded) != map[bool]int{false: 1, true: 0}[builtin] {
			t.Fatalf("built-in %v: candidate revision %d, live reloads %d", builtin, cand.Current().Revision(), len(live.reloaded))
		}
	}
}
