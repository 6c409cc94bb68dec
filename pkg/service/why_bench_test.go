package service

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// BenchmarkShouldRateLimitOK is BenchmarkShouldRateLimit with every
// request allowed (the clock moves 10ms a request, so a user's bucket is
// full again when its turn comes back): the common answer.
func BenchmarkShouldRateLimitOK(b *testing.B) {
	f := newFixture(b, nil)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}}
	entry := req.Descriptors[0].Entries[0]
	users := make([]string, 100_000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		entry.Value = users[i%len(users)]
		i++
		f.clk.Add(10 * time.Millisecond)
		if r, err := f.svc.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != ok {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkShouldRateLimitOverLimit is one spent bucket asked again and
// again: every answer OVER_LIMIT, with a retry-after (and, since issue 14,
// the dynamic metadata).
func BenchmarkShouldRateLimitOverLimit(b *testing.B) {
	f := newFixture(b, nil)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "spent")}}
	for range 5 {
		f.svc.ShouldRateLimit(context.Background(), req)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := f.svc.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != over {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkExplained is BenchmarkShouldRateLimit with the decision log on
// (at info, so allowed requests write nothing), and tracing off, on with
// every span sampled (exported nowhere), or on with none sampled; and a
// request over the limit, which carries metadata and writes a log line.
func BenchmarkExplained(b *testing.B) {
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(dropSpans{}))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	for _, bc := range []struct {
		name string
		opts func(*Options)
		over bool
	}{
		{"log", func(o *Options) {}, false},
		{"log+trace", func(o *Options) { o.Tracer = sampled.Tracer("bench") }, false},
		{"log+trace-unsampled", func(o *Options) { o.Tracer = unsampled.Tracer("bench") }, false},
		{"log+over-limit", func(o *Options) {}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pol, err := policy.Parse("test.yaml", []byte(testPolicy))
			if err != nil {
				b.Fatal(err)
			}
			pol.Activate()
			clk := new(clock.Fake)
			o := Options{Policy: func() *policy.Policy { return pol }, Store: memory.New(memory.Options{Clock: clk}), StoreName: "memory",
				Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk,
				DecisionLog: DecisionLog{Logger: slog.New(slog.DiscardHandler.WithAttrs(nil)), PerSecond: 1 << 20}}
			bc.opts(&o)
			svc, err := New(o)
			if err != nil {
				b.Fatal(err)
			}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}}
			entry := req.Descriptors[0].Entries[0]
			users := make([]string, 100_000)
			for i := range users {
				users[i] = "user-" + strconv.Itoa(i)
			}
			if bc.over {
				req.Descriptors[0].Entries[0].Value = "spent"
				for range 5 {
					svc.ShouldRateLimit(context.Background(), req)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !bc.over {
					entry.Value = users[i%len(users)]
					i++
				}
				if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
