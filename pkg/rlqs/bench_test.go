package rlqs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
)

// countingStore counts the calls a store is asked.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (c *countingStore) Decide(ctx context.Context, req *store.Request, res []store.Result) (store.Outcome, error) {
	c.calls.Add(1)
	return c.Store.Decide(ctx, req, res)
}

var _ store.Store = (*countingStore)(nil)

// BenchmarkReports: 10 emulated Envoys each report the same 1,000
// buckets every second (their reports 100 ms apart), every bucket with
// demand: one op is one report message of 1,000 usages answered with
// 1,000 assignments, in steady state, on the memory store. The usages
// report denied requests only: these Envoys do not run the token buckets
// they are sent, and allowed requests beyond their leases (in the first
// rounds, while the shares settle, some are DENY_ALL) would be overage
// charged as reports, which a real Envoy does not make; what a usage
// costs the service is the same. "answer" is
// the service alone; "marshal" adds the response's encoding as the
// server's codec does it (with proto: go-control-plane has no vtprotobuf
// code for RLQS). It reports the process's CPU time per message and per
// assignment (getrusage, so that a loaded machine's waits do not count),
// and the store calls per usage: what RLQS costs the store per bucket and
// report, instead of one call per request.
func BenchmarkReports(b *testing.B) {
	b.Run("answer", func(b *testing.B) { benchmarkReports(b, func(*rlqsv3.RateLimitQuotaResponse) error { return nil }) })
	// serve's decision log at info: an assignment is a debug line, so it
	// costs the handler's Enabled only.
	b.Run("answer-logged", func(b *testing.B) {
		log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		benchmarkReportsOn(b, Options{DecisionLog: service.DecisionLog{Logger: log}}, nil, func(*rlqsv3.RateLimitQuotaResponse) error { return nil }, func() {}, func(int) {})
	})
	b.Run("marshal", func(b *testing.B) {
		benchmarkReports(b, func(r *rlqsv3.RateLimitQuotaResponse) error {
			_, err := proto.Marshal(r)
			return err
		})
	})
}

func benchmarkReports(b *testing.B, send func(*rlqsv3.RateLimitQuotaResponse) error) {
	benchmarkReportsOn(b, Options{}, nil, send, func() {}, func(int) {})
}

// benchmarkReportsOn is BenchmarkReports on the store newStore makes (the
// fixture's memory store when nil); started and done are called around
// the measured reports, done with the usages reported.
func benchmarkReportsOn(b *testing.B, opts Options, newStore func(*clock.Fake) store.Store, send func(*rlqsv3.RateLimitQuotaResponse) error, started func(), done func(usages int)) {
	const streams, buckets = 10, 1000
	f := newFixture(b, "domains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: 100000\n      refill: 10000/s\n", opts)
	st := f.store
	if newStore != nil {
		st = newStore(f.clk)
	}
	counted := &countingStore{Store: st}
	f.svc.opts.Store = counted
	msgs := make([]*rlqsv3.RateLimitQuotaUsageReports, streams)
	conns := make([]*stream, streams)
	for i := range streams {
		msgs[i] = &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
		for u := range buckets {
			msgs[i].BucketQuotaUsages = append(msgs[i].BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": fmt.Sprint("user-", u)}}, NumRequestsDenied: 10,
			})
		}
		st, err := f.svc.open(context.Background(), send)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = st
		if err := f.svc.answer(st, msgs[i]); err != nil { // subscribe
			b.Fatal(err)
		}
	}
	report := func(i int) {
		f.clk.Add(time.Second / streams)
		if err := f.svc.answer(conns[i%streams], msgs[i%streams]); err != nil {
			b.Fatal(err)
		}
	}
	// Ten rounds for the shares to settle after the streams subscribed
	// one by one: a steady state.
	for i := range 10 * streams {
		report(i)
	}
	counted.calls.Store(0)
	b.ReportAllocs()
	started()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := range b.N {
		report(i)
	}
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	done(b.N * buckets)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/message")
	b.ReportMetric(float64(cpu)/float64(b.N*buckets), "cpu-ns/assignment")
	b.ReportMetric(float64(counted.calls.Load())/float64(b.N*buckets), "store-calls/usage")
	b.ReportMetric(testutil.ToFloat64(f.svc.m.storeErrors), "store-errors")
}

// cpuTime is the CPU time the process has used, user and system, in ns.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
