package service

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkShouldRateLimitOK is BenchmarkShouldRateLimit with every
// request allowed (the clock moves 10ms a request, so a user's bucket is
// full again when its turn comes back): the common answer.
func BenchmarkShouldRateLimitOK(b *testing.B) {
	f := newFixture(b, nil)
	benchUsers(b, f.svc, func() { f.clk.Add(10 * time.Millisecond) })
}

// BenchmarkShouldRateLimitOverLimit is one spent bucket asked again and
// again: every answer OVER_LIMIT, with a retry-after and the dynamic
// metadata.
func BenchmarkShouldRateLimitOverLimit(b *testing.B) {
	benchSpent(b, newFixture(b, nil).svc)
}

// benchSpent asks svc about one user, b.Loop times, once its bucket is
// spent: every answer OVER_LIMIT.
func benchSpent(b *testing.B, svc *Service) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "spent")}}
	for range 5 {
		svc.ShouldRateLimit(context.Background(), req)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := svc.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != over {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkExplained is BenchmarkShouldRateLimitOK with the decision log
// on (at info, so allowed requests write nothing), and tracing off, on
// with every span sampled (exported nowhere), or on with none sampled; and
// BenchmarkShouldRateLimitOverLimit with the decision log on (a line per
// request).
func BenchmarkExplained(b *testing.B) {
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(dropSpans{}))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	for _, bc := range []struct {
		name   string
		tracer trace.Tracer
		over   bool
	}{
		{"log", nil, false},
		{"log+trace", sampled.Tracer("bench"), false},
		{"log+trace-unsampled", unsampled.Tracer("bench"), false},
		{"log+over-limit", nil, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixtureWith(b, testPolicy, memoryStore, func(o *Options) {
				// A handler on at info, writing JSON nowhere: a refusal's line costs what it costs.
				o.DecisionLog = DecisionLog{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), PerSecond: 1 << 20}
				o.Tracer = bc.tracer
			})
			if bc.over {
				benchSpent(b, f.svc)
				return
			}
			benchUsers(b, f.svc, func() { f.clk.Add(10 * time.Millisecond) })
		})
	}
}

type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
