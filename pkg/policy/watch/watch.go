package watch

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// Defaults of Options.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultPoll     = 10 * time.Second
)

// SourceKey is the log attribute that names the policy's source (its
// file, or builtin:default.yaml) in every line about a policy, here and in
// cmd/tokengate.
const SourceKey = "policy_source"

// Result is the outcome of a reload, as the label of
// tokengate_policy_reloads_total.
type Result string

const (
	// Success: the file's new content is serving.
	Success Result = "success"
	// Failure: the file could not be read or did not validate; the last
	// good policy keeps serving.
	Failure Result = "failure"
	// Removed: the file of an Optional watcher is gone; no policy serves
	// until it is back.
	Removed Result = "removed"
)

// ErrNotRegular is the error, wrapped in an *fs.PathError, of a policy
// file that is not a regular file once symlinks are followed: a named
// pipe, a socket or a device (policy.ErrNotRegular).
var ErrNotRegular = policy.ErrNotRegular

// Reasons a reload fails, the values of the "reason" label of
// tokengate_policy_reload_failures_total.
const (
	// ReasonNotRegular: the path, or a file of its directory, is a named
	// pipe, socket or device (ErrNotRegular); it was not read.
	ReasonNotRegular = "not_regular_file"
	// ReasonRead: the file could not be opened or read (missing,
	// permission denied).
	ReasonRead = "read"
	// ReasonInvalid: the file was read but did not parse or validate.
	ReasonInvalid = "invalid"
)

// FailureReason classifies the error a Hook hears with Failure.
func FailureReason(err error) string {
	var pathErr *fs.PathError
	switch {
	case errors.Is(err, ErrNotRegular):
		return ReasonNotRegular
	case errors.As(err, &pathErr):
		return ReasonRead
	default:
		return ReasonInvalid
	}
}

// Hook hears of every reload that was tried: on Success p is the new
// policy and err is nil; on Failure p is the policy still serving and err
// says why the file was refused (a policy.Errors when it did not
// validate); on Removed (Options.Optional) p and err are nil. It runs on
// the watcher's goroutine and must not block.
type Hook func(result Result, p *policy.Policy, err error)

// Options configure a Watcher.
type Options struct {
	// Path is the policy file, or a directory of them (policy.ReadFiles:
	// a change to any of its *.yaml files reloads the set); either may be
	// a symlink (a ConfigMap mount).
	Path string
	// Clock must be the clock the store reads: new rule versions take
	// effect at its reading when the file is compiled. It also times a
	// burst of events (Debounce); the waits themselves are timers.
	Clock clock.Clock
	// Compiler numbers rule versions; nil uses a new one. Pass the same
	// Compiler to everything that compiles policies for one store.
	Compiler *policy.Compiler
	// Logger receives reloads and failures; nil discards them.
	Logger *slog.Logger
	// Debounce is how long the file must stay quiet after an event before
	// it is re-read; 0 means DefaultDebounce. A stream of events delays a
	// reload by at most ten times this.
	Debounce time.Duration
	// Poll is how often the file is re-read even without events; 0 means
	// DefaultPoll and a negative value turns polling off.
	Poll time.Duration
	// OnReload, when not nil, hears of every reload tried, the first
	// load included.
	OnReload Hook
	// Optional makes the policy optional (the candidate policy): New
	// succeeds whatever the file holds, with no policy when it is missing
	// or bad, and a missing file unloads the policy (Current returns nil,
	// the hook hears Removed) until the file is back. A bad file keeps
	// the last good policy, or none, as always.
	Optional bool
}

// Watcher holds the current policy and reloads it when its file changes.
type Watcher struct {
	opts  Options
	path  string // absolute, cleaned
	dir   bool   // path is a directory of policy files
	pub   *Publisher
	fs    *fsnotify.Watcher
	close sync.Once

	mu   sync.Mutex // serialises reloads
	seen string     // the last content (its hash) or read error tried
}

// New loads the policy file, activates it and starts watching its
// directory. It fails, changing nothing, when the file cannot be loaded.
// Call Run to apply changes, or Close to stop watching.
func New(opts Options) (*Watcher, error) {
	if opts.Clock == nil {
		return nil, errors.New("watch: Options.Clock is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Poll == 0 {
		opts.Poll = DefaultPoll
	}
	path, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("watch: policy path %q: %w", opts.Path, err)
	}
	pub, err := NewPublisher(PublisherOptions{Source: path, Clock: opts.Clock, Compiler: opts.Compiler, Logger: opts.Logger, OnReload: opts.OnReload})
	if err != nil {
		return nil, err
	}
	w := &Watcher{opts: opts, path: path, pub: pub}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		w.dir = true
	}
	if err := w.Reload(); err != nil && !opts.Optional {
		return nil, err
	}
	if w.fs, err = fsnotify.NewWatcher(); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	if err := w.fs.Add(w.watched()); err != nil {
		w.fs.Close()
		return nil, fmt.Errorf("watch: watching %s: %w", w.watched(), err)
	}
	return w, nil
}

// Current is the policy now serving; never nil after New succeeded, unless
// Options.Optional.
func (w *Watcher) Current() *policy.Policy { return w.pub.Current() }

// Run applies changes of the file until ctx is done or Close is called,
// then stops watching. Call it once.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.Close()
	var (
		quiet = time.NewTimer(time.Hour)
		burst = debounce{wait: w.opts.Debounce}
		poll  <-chan time.Time
	)
	quiet.Stop()
	if w.opts.Poll > 0 {
		t := time.NewTicker(w.opts.Poll)
		defer t.Stop()
		poll = t.C
	}
	schedule := func() {
		if burst.event(w.opts.Clock.Now()) {
			quiet.Reset(w.opts.Debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fs.Events:
			if !ok {
				return nil
			}
			if w.concerns(ev) {
				schedule()
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return nil
			}
			w.opts.Logger.Warn("policy watch error; re-reading the file", SourceKey, w.path, "err", err)
			schedule()
		case <-quiet.C:
			burst.fired()
			_ = w.Reload() // logged and reported by Reload
		case <-poll:
			if !burst.pending {
				_ = w.Reload()
			}
		}
	}
}

// debounce holds a reload back while events keep coming: each event
// pushes it wait further off, until the first event of the burst is ten
// waits old; from then on events no longer push it, so a stream of events
// delays a reload by at most ten waits (and the one running). Instants are
// clock.Clock readings; not safe for concurrent use (Run's goroutine).
type debounce struct {
	wait    time.Duration
	pending bool  // a reload is scheduled
	first   int64 // the first event since the last reload
}

// event is told of an event at now, and reports whether the reload is to
// be (re)scheduled wait from now.
func (d *debounce) event(now int64) bool {
	if !d.pending {
		d.pending, d.first = true, now
		return true
	}
	// A reading behind first (a clock that moved back) is no time passed.
	return now-d.first < 10*int64(d.wait)
}

// fired is told that the scheduled reload runs.
func (d *debounce) fired() { d.pending = false }

// watched is the directory fsnotify watches: the policy directory, or the
// policy file's.
func (w *Watcher) watched() string {
	if w.dir {
		return w.path
	}
	return filepath.Dir(w.path)
}

// concerns reports whether ev may have changed the policy: an event on the
// file itself (for a directory, on any of its policy files) or on the
// "..data" symlink of a Kubernetes volume.
func (w *Watcher) concerns(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod || filepath.Dir(ev.Name) != w.watched() {
		return false
	}
	name := filepath.Base(ev.Name)
	if name == "..data" {
		return true
	}
	if w.dir {
		return policy.InSet(name)
	}
	return name == filepath.Base(w.path)
}

// Close stops watching; Current keeps returning the last policy.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() { err = w.fs.Close() })
	return err
}

// Reload re-reads the file (or the directory's files) now. When the
// content differs from the last tried it is compiled against the serving
// policy and, if good, swapped in and activated; a bad file leaves the
// serving policy in place and is returned as the error. Content already
// tried (good or bad) is skipped and returns nil, so a bad file is
// reported once, not on every poll.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.pub.Current()
	files, err := policy.ReadFiles(w.opts.Path)
	if err != nil {
		err = fmt.Errorf("read policy: %w", err)
		if w.seen == err.Error() {
			return nil
		}
		w.seen = err.Error()
		if w.opts.Optional && errors.Is(err, fs.ErrNotExist) {
			w.pub.Withdraw()
			return nil
		}
		w.pub.Refuse(err)
		return err
	}
	sum := policy.FilesSHA256(w.opts.Path, files)
	seen := hex.EncodeToString(sum[:])
	if w.seen == seen {
		return nil
	}
	w.seen = seen
	if cur != nil && cur.SHA256() == seen {
		w.opts.Logger.Info("policy file is back to the content serving", SourceKey, w.path, "sha256", seen)
		return nil
	}
	_, err = w.pub.Apply(w.opts.Path, files)
	return err
}
