package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// policyFile is a valid policy of the given revision.
func policyFile(revision int) []byte {
	return fmt.Appendf(nil, `revision: %d
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: %d
      refill: 10/s
`, revision, 100+revision)
}

var badFile = []byte("revision: 99\ndomains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: -1\n      refill: 10/q\n")

// reloads records what the hook hears.
type reloads struct {
	mu     sync.Mutex
	events []string // "success 3", "failure <err>"
}

func (r *reloads) hook(result Result, p *policy.Policy, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch result {
	case Success:
		r.events = append(r.events, fmt.Sprintf("success %d", p.Revision()))
	case Removed:
		r.events = append(r.events, "removed")
	default:
		r.events = append(r.events, fmt.Sprintf("failure %v", err))
	}
}

func (r *reloads) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type fixture struct {
	w    *Watcher
	rel  *reloads
	logs *lockedBuffer
}

// start watches path with a short debounce and runs the watcher until the
// test ends.
func start(t *testing.T, path string, poll time.Duration) *fixture {
	return startDebounce(t, path, poll, 50*time.Millisecond)
}

func startDebounce(t *testing.T, path string, poll, debounce time.Duration) *fixture {
	t.Helper()
	f := &fixture{rel: &reloads{}, logs: &lockedBuffer{}}
	w, err := New(Options{
		Path:     path,
		Clock:    new(clock.Fake),
		Logger:   slog.New(slog.NewTextHandler(f.logs, nil)),
		Debounce: debounce,
		Poll:     poll,
		OnReload: f.rel.hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

// waitLimit is how long a test waits for the watcher to act on a change.
const waitLimit = 5 * time.Second

// successes are the revisions loaded, in order; failures are left out
// because an in-place write can be read torn (truncated, not yet written),
// which is refused and then fixed by the write's own event.
func (f *fixture) successes() string {
	var s []string
	for _, e := range f.rel.snapshot() {
		if rev, ok := strings.CutPrefix(e, "success "); ok {
			s = append(s, rev)
		}
	}
	return strings.Join(s, ",")
}

// waitFailure waits for a refusal whose error contains want.
func (f *fixture) waitFailure(t *testing.T, want string) {
	t.Helper()
	poll.Eventually(t, waitLimit, func() bool {
		for _, e := range f.rel.snapshot() {
			if strings.HasPrefix(e, "failure") && strings.Contains(e, want) {
				return true
			}
		}
		return false
	}, "a failure with "+want)
}

func (f *fixture) waitRevision(t *testing.T, revision int64) {
	t.Helper()
	poll.Eventually(t, waitLimit, func() bool { return f.w.Current().Revision() == revision }, fmt.Sprintf("revision %d", revision))
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInPlaceWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, policyFile(1))
	f := start(t, path, -1)
	if f.w.Current().Revision() != 1 {
		t.Fatal("first load")
	}
	write(t, path, policyFile(1)) // same content: no reload
	write(t, path, policyFile(2))
	f.waitRevision(t, 2)
	// The hook runs just after the swap: wait for it, then check nothing
	// else was loaded (the rewrite of the same content reloads nothing).
	poll.Eventually(t, waitLimit, func() bool { return strings.HasSuffix(f.successes(), "2") }, "the hook of revision 2")
	if got := f.successes(); got != "1,2" {
		t.Fatalf("revisions loaded: %s", got)
	}
	if v := f.w.Current().Rule("edge", "per-user").Version; v.Lineage().Current() != v || v.Params.Capacity() != 102 {
		t.Fatalf("the new version is not active: %+v", v)
	}
}

func TestRenameOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write(t, path, policyFile(1))
	f := start(t, path, -1)
	for rev := 2; rev <= 3; rev++ {
		tmp := filepath.Join(dir, fmt.Sprintf(".policy.yaml.swp%d", rev))
		write(t, tmp, policyFile(rev))
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		f.waitRevision(t, int64(rev))
	}
}

// TestConfigMapSwap replays what the kubelet does to a mounted ConfigMap:
// policy.yaml -> ..data/policy.yaml, ..data -> ..<timestamp>, and an update
// renames a new ..data_tmp symlink over ..data.
func TestConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	publish := func(rev int) {
		ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", rev, rev)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, ts, "policy.yaml"), policyFile(rev))
		swapData(t, dir, ts)
		if rev > 1 {
			old := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", rev-1, rev-1)
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(1)
	path := filepath.Join(dir, "policy.yaml")
	if err := os.Symlink(filepath.Join("..data", "policy.yaml"), path); err != nil {
		t.Fatal(err)
	}
	f := start(t, path, -1)
	for rev := 2; rev <= 4; rev++ {
		publish(rev)
		f.waitRevision(t, int64(rev))
	}
}

// swapData points dir's ..data at ts as the kubelet does: a new
// ..data_tmp symlink renamed over ..data.
func swapData(t *testing.T, dir, ts string) {
	t.Helper()
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteThenRecreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, policyFile(1))
	f := start(t, path, -1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	f.waitFailure(t, "read policy: open "+path)
	if f.w.Current().Revision() != 1 {
		t.Fatalf("after delete: revision %d", f.w.Current().Revision())
	}
	write(t, path, policyFile(2))
	f.waitRevision(t, 2)
}

// TestBurst: 50 writes within about 100 ms are coalesced and the last
// content wins.
func TestBurst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, policyFile(0))
	f := startDebounce(t, path, -1, 100*time.Millisecond)
	for rev := 1; rev <= 50; rev++ {
		write(t, path, policyFile(rev))
		time.Sleep(2 * time.Millisecond)
	}
	f.waitRevision(t, 50)
	// Every reload tried, good or a torn read, is in the hook's record;
	// without the debounce there would be one per write.
	if got := f.rel.snapshot(); len(got) > 25 {
		t.Fatalf("%d reloads for 50 writes: not debounced: %v", len(got), got)
	}
}

func TestInvalidFileKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, policyFile(1))
	f := start(t, path, -1)
	good := f.w.Current()
	write(t, path, badFile)
	// Both issues of the file come in one refusal.
	f.waitFailure(t, `domain "edge" rule "per-user": capacity -1 out of range [1, 1000000000000000]
`+path+`:7: domain "edge" rule "per-user": refill: rate "10/q"`)
	if f.w.Current() != good || f.successes() != "1" {
		t.Fatal("a bad file replaced the policy")
	}
	if logs := f.logs.String(); !strings.Contains(logs, "policy refused; the last good policy keeps serving") || !strings.Contains(logs, "10/q") {
		t.Fatalf("log:\n%s", logs)
	}
	write(t, path, policyFile(2))
	f.waitRevision(t, 2)
}

// TestPollFallback: a symlink to a file in another directory, edited in
// place there, raises no event in the watched directory; the poll sees it.
func TestPollFallback(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.yaml")
	write(t, target, policyFile(1))
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	f := start(t, path, 20*time.Millisecond)
	write(t, target, policyFile(2))
	f.waitRevision(t, 2)
}

func TestNewRefusesBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, badFile)
	var rel reloads
	var logs lockedBuffer
	_, err := New(Options{Path: path, Clock: new(clock.Fake), OnReload: rel.hook, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var errs policy.Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("New: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, `msg="policy refused; no policy was serving"`) || strings.Contains(l, "last good") {
		t.Fatalf("a refused first policy keeps nothing serving: %s", l)
	}
	if got := rel.snapshot(); len(got) != 1 || !strings.HasPrefix(got[0], "failure") {
		t.Fatalf("hook: %v", got)
	}
	if _, err := New(Options{Path: filepath.Join(t.TempDir(), "missing.yaml"), Clock: new(clock.Fake)}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := New(Options{Path: path}); err == nil {
		t.Fatal("no clock accepted")
	}
}

// TestRevisionDownIsWarned: a file with a lower revision than the one
// serving (a rollback) is applied like any change, with a warning.
func TestRevisionDownIsWarned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, policyFile(3))
	f := start(t, path, -1)
	write(t, path, policyFile(4))
	f.waitRevision(t, 4)
	if logs := f.logs.String(); strings.Contains(logs, "revision went down") {
		t.Fatalf("a higher revision was warned about:\n%s", logs)
	}
	write(t, path, policyFile(3))
	f.waitRevision(t, 3)
	if v := f.w.Current().Rule("edge", "per-user").Version; v.Params.Capacity() != 103 || v.Lineage().Current() != v {
		t.Fatalf("the rollback is not active: %+v", v)
	}
	// The policy serves before its lines are logged.
	poll.Eventually(t, 5*time.Second, func() bool {
		logs := f.logs.String()
		return strings.Contains(logs, "policy revision went down: applied as a rollback") && strings.Contains(logs, "previous_revision=4")
	}, "the warning of the rollback")
}
