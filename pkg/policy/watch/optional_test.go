package watch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/pkg/clock"
)

// TestOptional: an Optional watcher starts without its file, and with a
// bad one; a good file loads, a bad one keeps it, a removal unloads it and
// the same content back loads it again.
func TestOptional(t *testing.T) {
	path := filepath.Join(t.TempDir(), "candidate.yaml")
	rel := &reloads{}
	w, err := New(Options{Path: path, Clock: new(clock.Fake), Logger: slog.New(slog.DiscardHandler), Poll: -1, OnReload: rel.hook, Optional: true})
	if err != nil {
		t.Fatalf("New without the file: %v", err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	if w.Current() != nil {
		t.Fatal("a policy without its file")
	}
	write(t, path, badFile)
	if err := w.Reload(); err == nil || w.Current() != nil {
		t.Fatalf("bad file: %v, %v", err, w.Current())
	}
	write(t, path, policyFile(1))
	poll.Eventually(t, waitLimit, func() bool { return w.Current() != nil && w.Current().Revision() == 1 }, "revision 1")
	write(t, path, badFile)
	if err := w.Reload(); err == nil || w.Current().Revision() != 1 {
		t.Fatalf("a bad file replaced the last good one: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, waitLimit, func() bool { return w.Current() == nil }, "no policy after the removal")
	write(t, path, policyFile(1))
	poll.Eventually(t, waitLimit, func() bool { return w.Current() != nil }, "revision 1 back")
	var got []string
	for _, e := range rel.snapshot() {
		if !strings.HasPrefix(e, "failure") {
			got = append(got, e)
		}
	}
	if want := []string{"success 1", "removed", "success 1"}; !slices.Equal(got, want) {
		t.Fatalf("hook heard %v, want %v among failures", rel.snapshot(), want)
	}

	// Bad at the start: New still succeeds, with no policy.
	bad := filepath.Join(t.TempDir(), "candidate.yaml")
	write(t, bad, badFile)
	w2, err := New(Options{Path: bad, Clock: new(clock.Fake), Poll: -1, Optional: true})
	if err != nil || w2.Current() != nil {
		t.Fatalf("bad file at start: %v, %v", err, w2.Current())
	}
	w2.Close()
}
