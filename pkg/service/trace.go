package service

import (
	"context"
	"errors"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokengate/tokengate/pkg/clock"
)

// SpanName is the span of one decision (Options.Tracer), a child of the
// trace context the caller's ctx carries (the server extracts Envoy's W3C
// traceparent from the gRPC metadata).
const SpanName = "tokengate.decide"

// Attributes of a decision's span.
const (
	AttrDomain        = "tokengate.domain"
	AttrRules         = "tokengate.rules"   // the rules matched, in descriptor order
	AttrResults       = "tokengate.results" // each descriptor's result label, in order (the request id left out)
	AttrCode          = "tokengate.code"    // the response's overall code: OK, OVER_LIMIT
	AttrDegraded      = "tokengate.degraded"
	AttrStore         = "tokengate.store"             // Options.StoreName
	AttrStoreDuration = "tokengate.store.duration_ns" // the store calls, on the service's clock; 0 when none was made
)

// decisionSpan is the span of one decision; its zero value, without a
// tracer, does nothing and costs a nil check.
type decisionSpan struct {
	span       trace.Span // nil: not traced
	clk        clock.Clock
	storeStart int64
	storeNs    int64
}

func (s *Service) startSpan(ctx context.Context) (context.Context, decisionSpan) {
	if s.opts.Tracer == nil {
		return ctx, decisionSpan{}
	}
	ctx, sp := s.opts.Tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, decisionSpan{span: sp, clk: s.opts.Clock}
}

// storeBegin and storeEnd time the store calls of a recorded span.
func (d *decisionSpan) storeBegin() {
	if d.span != nil && d.span.IsRecording() {
		d.storeStart = d.clk.Now()
	}
}

func (d *decisionSpan) storeEnd() {
	if d.span != nil && d.span.IsRecording() {
		d.storeNs = d.clk.Now() - d.storeStart
	}
}

// end describes the decision on the span and ends it.
func (d *decisionSpan) end(domain, storeName string, rs *reqState, vs []Verdict, resp *rlsv3.RateLimitResponse) {
	if d.span == nil {
		return
	}
	defer d.span.End()
	if !d.span.IsRecording() {
		return
	}
	rules, results := make([]string, 0, len(vs)), make([]string, 0, len(vs))
	degraded := false
	for i := range vs {
		v := &vs[i]
		if v.Result == ResultRequestID {
			continue
		}
		results = append(results, v.Result.String())
		if v.Rule != nil {
			rules = append(rules, v.Rule.Name)
		}
		degraded = degraded || v.Degraded()
	}
	d.span.SetAttributes(
		attribute.String(AttrDomain, domain),
		attribute.StringSlice(AttrRules, rules),
		attribute.StringSlice(AttrResults, results),
		attribute.String(AttrCode, resp.OverallCode.String()),
		attribute.Bool(AttrDegraded, degraded),
		attribute.String(AttrStore, storeName),
		attribute.Int64(AttrStoreDuration, d.storeNs),
	)
	if err := errors.Join(rs.enforced.err, rs.shadow.err); err != nil {
		d.span.RecordError(err)
		d.span.SetStatus(otelcodes.Error, "store failed: on_store_error answered")
	}
}
