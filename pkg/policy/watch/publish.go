package watch

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
)

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	// Source names where policies come from (a file, a directory, an xDS
	// server) in every log line, as SourceKey.
	Source string
	// Clock must be the clock the store reads: new rule versions take
	// effect at its reading when a policy is compiled.
	Clock clock.Clock
	// Compiler numbers rule versions; nil uses a new one. Pass the
	// process's one Compiler to every source of policies for one store.
	Compiler *policy.Compiler
	// Logger receives loads and refusals; nil discards them.
	Logger *slog.Logger
	// OnReload, when not nil, hears of every load tried, the first
	// included.
	OnReload Hook
}

// Publisher is the versioned transition every policy source goes through:
// it compiles a new set of files against the policy serving, activates the
// result and only then serves it, and logs and reports (OnReload) each load
// and each refusal alike, whether the files came from disk (Watcher) or
// from a management server (pkg/policy/xds). A refused set changes
// nothing: the last good policy keeps serving.
//
// Current is safe for concurrent use and never blocks; Apply and Refuse run
// one at a time, in the order they are called.
type Publisher struct {
	opts    PublisherOptions
	mu      sync.Mutex // serialises Apply and Refuse: activations in compile order
	current atomic.Pointer[policy.Policy]
}

// NewPublisher returns a Publisher serving nothing yet (Current is nil
// until the first Apply succeeds).
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if opts.Clock == nil {
		return nil, errors.New("watch: PublisherOptions.Clock is required")
	}
	if opts.Compiler == nil {
		opts.Compiler = new(policy.Compiler)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{opts: opts}, nil
}

// Current is the policy now serving; nil before the first Apply succeeded.
func (p *Publisher) Current() *policy.Policy { return p.current.Load() }

// Source is what PublisherOptions.Source named.
func (p *Publisher) Source() string { return p.opts.Source }

// Apply compiles files (a set named name, policy.Compiler.CompileFiles)
// against the policy serving and, when they validate, activates the new
// policy and serves it. Files that do not validate are refused (Refuse)
// and returned as the error; the serving policy stays.
func (p *Publisher) Apply(name string, files []policy.File) (*policy.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.current.Load()
	next, err := p.opts.Compiler.CompileFiles(name, files, cur, p.opts.Clock.Now())
	if err != nil {
		p.refused(cur, err)
		return nil, err
	}
	// Publish the new versions before serving them, so that nothing reading
	// a lineage's current version (the store's janitor) lags the policy.
	next.Activate()
	p.current.Store(next)
	p.loaded(cur, next)
	return next, nil
}

// Refuse reports a load that failed before there was anything to compile
// (a file that could not be read, a resource that did not decode): logged
// and heard by OnReload as a Failure; the serving policy stays.
func (p *Publisher) Refuse(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused(p.current.Load(), err)
}

// Withdraw stops serving a policy (an Optional watcher's file is gone):
// Current is nil until the next Apply. A policy withdrawn is logged and
// heard by OnReload as Removed; with none serving it is only logged.
func (p *Publisher) Withdraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.current.Swap(nil)
	if prev == nil {
		p.opts.Logger.Info("policy file absent: no policy", SourceKey, p.opts.Source)
		return
	}
	p.opts.Logger.Info("policy file removed: no policy until it is back", SourceKey, p.opts.Source,
		"previous_revision", prev.Revision(), "previous_sha256", prev.SHA256())
	if p.opts.OnReload != nil {
		p.opts.OnReload(Removed, nil, nil)
	}
}

func (p *Publisher) loaded(prev, next *policy.Policy) {
	log := p.opts.Logger
	attrs := []any{SourceKey, p.opts.Source, "revision", next.Revision(), "sha256", next.SHA256(), "domains", len(next.Domains())}
	if prev != nil {
		attrs = append(attrs, "previous_revision", prev.Revision(), "previous_sha256", prev.SHA256())
	}
	log.Info("policy loaded", attrs...)
	if prev != nil && next.Revision() < prev.Revision() {
		// Applied like any change (the memory and Redis stores order
		// versions by when they were applied): say so, in case it is a
		// mistake rather than a rollback.
		log.Warn("policy revision went down: applied as a rollback", SourceKey, p.opts.Source,
			"revision", next.Revision(), "previous_revision", prev.Revision())
	}
	warnings := next.Warnings()
	for _, is := range warnings[:min(len(warnings), policy.MaxBriefIssues)] {
		log.Warn("policy warning", SourceKey, p.opts.Source, "warning", policy.Brief(is))
	}
	if more := len(warnings) - policy.MaxBriefIssues; more > 0 {
		log.Warn("more policy warnings not logged", SourceKey, p.opts.Source, "count", more)
	}
	if p.opts.OnReload != nil {
		p.opts.OnReload(Success, next, nil)
	}
}

// refused logs a refused load and tells OnReload. With no policy serving
// (the first load) there is no last good one to keep, and the line says so.
func (p *Publisher) refused(cur *policy.Policy, err error) {
	attrs := []any{SourceKey, p.opts.Source, "err", policy.Brief(err)}
	if cur == nil {
		p.opts.Logger.Error("policy refused; no policy was serving", attrs...)
	} else {
		attrs = append(attrs, "serving_revision", cur.Revision(), "serving_sha256", cur.SHA256())
		p.opts.Logger.Error("policy refused; the last good policy keeps serving", attrs...)
	}
	if p.opts.OnReload != nil {
		p.opts.OnReload(Failure, cur, err)
	}
}
