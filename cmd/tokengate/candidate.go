package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/candidate"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/policy/watch"
	"github.com/tokengate/tokengate/pkg/service"
)

// candidatePolicy is the candidate policy (--candidate-policy), decided
// beside the live one and never answering: its file's watcher and its
// tracker.
type candidatePolicy struct {
	file    policyFile
	tracker *candidate.Tracker
}

// loadCandidate watches the candidate policy file, when one is given. The
// file is optional (watch.Options.Optional): missing or bad at the start
// it is no candidate, and the live policy serves as ever; a bad file later
// keeps the last good candidate, a removed one turns the candidate off.
// The candidate compiles with a Compiler of its own: its buckets are in a
// store of their own, of the live store's kind. Its top list
// names buckets under keys, as the live service names them.
func loadCandidate(ctx context.Context, s settings, clk clock.Clock, reg prometheus.Registerer, keys *keyhash.Key, log *slog.Logger) (*candidatePolicy, error) {
	if s.CandidatePolicy == "" {
		return nil, nil
	}
	m := metrics.NewCandidate(reg)
	clog := log.With(slog.String("policy", "candidate"))
	w, err := watch.New(watch.Options{
		Path: s.CandidatePolicy, Clock: clk, Compiler: newCompiler(s, clk), Logger: clog, Optional: true,
		OnReload: func(r watch.Result, p *policy.Policy, _ error) {
			m.Reloads.WithLabelValues(string(r)).Inc()
			switch r {
			case watch.Success:
				m.SetPolicy(p.Revision(), p.SHA256(), true)
			case watch.Removed:
				m.SetPolicy(0, "", false)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer w.Close()
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			clog.Error("candidate policy watcher stopped; the last candidate keeps being decided", slog.String("error", err.Error()))
		}
	}()
	return &candidatePolicy{file: w, tracker: candidate.New(candidate.Options{Metrics: m, Clock: clk, Logger: clog, KeyHash: keys})}, nil
}

// options are the service's Candidate on the backend's candidate store.
func (cp *candidatePolicy) options(be *backend) *service.Candidate {
	if cp == nil {
		return nil
	}
	// A Redis round trip is not added to the answer's: the candidate is
	// decided on a goroutine of its own.
	return &service.Candidate{Policy: cp.file.Current, Store: be.candidate, Tracker: cp.tracker, Async: be.name == "redis"}
}

// files is the candidate's file, for SIGHUP; none without a candidate.
func (cp *candidatePolicy) files() []policyFile {
	if cp == nil {
		return nil
	}
	return []policyFile{cp.file}
}

// handler serves /debug/candidate; nil without a candidate.
func (cp *candidatePolicy) handler() http.Handler {
	if cp == nil {
		return nil
	}
	return cp.tracker.Handler(cp.file.Current)
}
