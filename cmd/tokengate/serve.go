package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/frontdoor"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/policy/watch"
	"github.com/tokengate/tokengate/pkg/server"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// serve runs tokengate until SIGTERM or SIGINT, then drains and returns.
// SIGHUP re-reads the policy file (reloadOnHangup).
func serve(args []string, stderr io.Writer) error {
	s, err := loadSettings(args)
	if err != nil {
		return err
	}
	return serveSettings(s, stderr, nil)
}

// serveSettings is serve once the settings are read, from tokengate's
// flags, environment and file or from envoyproxy/ratelimit's environment
// (compatenv.go), whose inert variables that are set, notes, it logs first.
func serveSettings(s settings, stderr io.Writer, notes []compatNote) error {
	log := s.logger(stderr)
	for _, n := range notes {
		log.Info("envoyproxy/ratelimit variable set, without effect here", slog.String("variable", n.name), slog.String("value", n.value), slog.String("why", n.doc))
	}
	keys, err := serveKeyHash(s, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Caught from here on: SIGHUP's default action ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	clk := clock.NewMonotonic()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	src, err := loadPolicy(ctx, s, clk, m, log)
	if err != nil {
		return err
	}
	current := src.current
	cand, err := loadCandidate(ctx, s, clk, reg, keys, log)
	if err != nil {
		return err
	}
	go reloadOnHangup(ctx, hup, src.file, log, cand.files()...)
	grpcTLS, err := s.GRPCTLS.tls(log)
	if err != nil {
		return err
	}

	be := openMemory
	if s.Store == "redis" {
		be = openRedis
	}
	st, err := be(ctx, s, reg, clk, log)
	if err != nil {
		return err
	}
	defer st.close()

	tr, err := startTracing(ctx, s.OTLPEndpoint, versionString())
	if err != nil {
		return err
	}
	defer func() {
		if err := tr.shutdown(context.Background()); err != nil {
			log.Warn("tracing: spans not sent at shutdown", slog.String("error", err.Error()))
		}
	}()
	svc, err := service.New(service.Options{
		Policy: current, Store: st.store, Local: st.local, StoreName: st.name, Metrics: m, Clock: clk, Logger: log,
		ShadowAll: s.ShadowAll, LimitHeaders: s.limitHeaderNames(), ClientReasonHeader: s.ClientReasonHeader, Candidate: cand.options(st),
		DecisionLog: decisionLog(s, log), Tracer: tr.tracer, KeyHash: keys,
	})
	if err != nil {
		return err
	}
	doors, err := frontdoor.New(frontdoor.Options{
		Service: svc, Policy: current, Metrics: metrics.NewFrontDoors(reg), Logger: log, Clock: clk,
		ExtAuthzDenyStatus: s.ExtAuthzDenyStatus, ForwardAuthDenyStatus: s.ForwardAuthDenyStatus,
	})
	if err != nil {
		return err
	}
	quotas, err := startRLQS(ctx, s, current, st.store, reg, clk, log, keys)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		GRPCAddr: s.GRPCAddr, HTTPAddr: s.HTTPAddr, Metrics: m, Gatherer: reg,
		RateLimit: doors.RateLimit(svc), Authorization: doors.ExtAuthz(), ForwardAuth: doors.ForwardAuth(), RateLimitQuota: quotas, RateLimitQuotaView: quotas.Handler(),
		Policy: current, Candidate: cand.handler(), Store: st.health, ReadyRequiresStore: s.ReadyRequiresStore, Ready: allReady(src.ready, st.ready), TLS: grpcTLS,
		Pprof: s.Pprof, ShutdownTimeout: s.ShutdownTimeout, Logger: log, Clock: clk, GRPCMaxRecvBytes: s.GRPCMaxRecvBytes,
		DebugAddr: s.DebugAddr, MetricsListener: s.metricsListener(),
		Propagator: tr.propagator,
	})
	if err != nil {
		return err
	}
	log.Info("tokengate starting", slog.String("version", versionString()), slog.String("store", s.Store), slog.Bool("grpc_tls", grpcTLS != nil), slog.Bool("tracing", tr.tracer != nil))
	return srv.Serve(ctx)
}

// allReady is the readiness of every part that has one (nil: always
// ready): the first reason one gives not to be ready, nil when none does.
func allReady(parts ...func() error) func() error {
	return func() error {
		for _, ready := range parts {
			if ready != nil {
				if err := ready(); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// decisionLog is the decision log of ShouldRateLimit and of RLQS (each its
// own budgets): serve's logger, at most
// --decision-log-rate lines a second per level; 0 turns it off.
func decisionLog(s settings, log *slog.Logger) service.DecisionLog {
	if s.DecisionLogRate == 0 {
		return service.DecisionLog{}
	}
	return service.DecisionLog{Logger: log, PerSecond: s.DecisionLogRate}
}

// policySource is where the policy comes from: what serves now, the
// file's watcher (nil for the built-in policy and xDS), and readiness (nil:
// always ready).
type policySource struct {
	current func() *policy.Policy
	file    policyFile
	ready   func() error
}

// loadPolicy loads the policy file and keeps watching it, subscribes to
// the xDS server, or compiles the built-in policy when neither is given.
// Every policy of the process is compiled by one Compiler.
func loadPolicy(ctx context.Context, s settings, clk clock.Clock, m *metrics.Metrics, log *slog.Logger) (policySource, error) {
	compiler := newCompiler(s, clk)
	switch {
	case s.XDS.Server != "":
		c, err := loadXDS(ctx, s, compiler, clk, m, log)
		if err != nil {
			return policySource{}, err
		}
		return policySource{current: c.Current, ready: c.Ready}, nil
	case s.Policy == "":
		p, err := compiler.Compile(config.DefaultName, config.Default, nil, clk.Now())
		if err != nil {
			return policySource{}, fmt.Errorf("built-in policy: %w", err)
		}
		p.Activate()
		reloaded(m, watch.Success, p, nil)
		log.Info("policy loaded", slog.String(watch.SourceKey, p.Name()), slog.Int64("revision", p.Revision()), slog.String("sha256", p.SHA256()))
		return policySource{current: func() *policy.Policy { return p }}, nil
	}
	w, err := watch.New(watch.Options{
		Path: s.Policy, Clock: clk, Compiler: compiler, Logger: log,
		OnReload: func(r watch.Result, p *policy.Policy, err error) { reloaded(m, r, p, err) },
	})
	if err != nil {
		return policySource{}, err
	}
	go func() {
		defer w.Close()
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("policy watcher stopped; the last good policy keeps serving", slog.String("error", err.Error()))
		}
	}()
	return policySource{current: w.Current, file: w}, nil
}

// reloaded counts a policy load, and a failure's reason, and exports the
// policy now serving (the watcher logs it).
func reloaded(m *metrics.Metrics, r watch.Result, p *policy.Policy, err error) {
	m.Reloads.WithLabelValues(string(r)).Inc()
	if r == watch.Success {
		m.SetPolicy(p.Revision(), p.SHA256())
		return
	}
	m.ReloadFailures.WithLabelValues(watch.FailureReason(err)).Inc()
}

// policyFile is the watcher of the policy file (*watch.Watcher).
type policyFile interface {
	Reload() error
	Current() *policy.Policy
}

// reloadOnHangup re-reads the policy file on every SIGHUP until ctx ends,
// as Unix daemons do, whether or not the watcher saw the file change. The
// watcher logs and counts a new policy or a refusal, and a refused file
// leaves the last good policy serving; a file whose content was already
// tried is logged here as unchanged. Signals that arrive during a reload
// are coalesced into one more. Without a policy file (file nil: the
// built-in policy, or xDS) there is nothing to re-read. The others (the
// candidate policy) are re-read after it, and their watchers log what they
// found.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, file policyFile, log *slog.Logger, others ...policyFile) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		reloadLive(file, log)
		for _, f := range others {
			_ = f.Reload() // logged and counted by its watcher
		}
	}
}

// reloadLive is reloadOnHangup's re-read of the live policy file.
func reloadLive(file policyFile, log *slog.Logger) {
	if file == nil {
		log.Info("SIGHUP: no policy file to reload; the policy serving stays")
		return
	}
	log.Info("SIGHUP: reloading policy")
	before := file.Current()
	if err := file.Reload(); err == nil && file.Current() == before {
		log.Info("SIGHUP: policy file unchanged since it was last read",
			slog.Int64("serving_revision", before.Revision()), slog.String("serving_sha256", before.SHA256()))
	}
}

// openMemory builds the memory store and starts its janitor; with a
// candidate policy, a second one for the candidate's buckets (of the same
// size, its statistics not exported).
func openMemory(ctx context.Context, s settings, reg prometheus.Registerer, clk clock.Clock, _ *slog.Logger) (*backend, error) {
	opts := memory.Options{MaxBuckets: s.MaxBuckets, ReplayWindow: s.ReplayWindow, Clock: clk}
	mem := memory.New(opts)
	reg.MustRegister(mem.Collector())
	go mem.Run(ctx, s.JanitorInterval)
	var cand store.Store
	if s.CandidatePolicy != "" {
		cm := memory.New(opts)
		go cm.Run(ctx, s.JanitorInterval)
		cand = cm
	}
	return &backend{name: "memory", store: mem, candidate: cand, close: func() {}}, nil
}
