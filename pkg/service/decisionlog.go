package service

import (
	"context"
	"log/slog"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokengate/tokengate/internal/logbudget"
)

// DecisionLog configures the log of decisions (Options.DecisionLog): each
// descriptor limited or degraded is a line at info, every other decision a
// line at debug. Each level has its own budget of lines per second, so a
// flood of refusals costs a few lines, and the first line after some were
// dropped says how many ("dropped"). The domain is clipped
// (logbudget.Clip); no other client value is in a line.
type DecisionLog struct {
	// Logger receives the lines; nil: no decision log.
	Logger *slog.Logger
	// PerSecond is the most lines of each level a second [100].
	PerSecond int
}

// Messages of the decision log.
const (
	MsgLimited  = "rate limited"    // an OVER_LIMIT descriptor the store decided (info)
	MsgDegraded = "degraded answer" // on_store_error answered it, OK or OVER_LIMIT (info)
	MsgDecision = "decision"        // anything else (debug)
)

// decisionLog writes the decision log; nil when it is off.
type decisionLog struct {
	log         *slog.Logger
	info, debug *logbudget.Budget
}

func newDecisionLog(o DecisionLog) *decisionLog {
	if o.Logger == nil {
		return nil
	}
	if o.PerSecond <= 0 {
		o.PerSecond = 100
	}
	return &decisionLog{
		log:   o.Logger,
		info:  logbudget.New(o.PerSecond, time.Second),
		debug: logbudget.New(o.PerSecond, time.Second),
	}
}

// write logs the verdicts of one request. With nothing limited or degraded
// and debug off it only asks the handler whether debug is on.
func (l *decisionLog) write(ctx context.Context, now int64, domain string, rs *reqState, vs []Verdict) {
	debug := l.log.Enabled(ctx, slog.LevelDebug)
	for i := range vs {
		v := &vs[i]
		level, msg, budget := slog.LevelDebug, MsgDecision, l.debug
		switch {
		case v.Result == ResultRequestID:
			continue
		case v.Degraded(): // before OVER_LIMIT: on_store_error deny is no limit reached
			level, msg, budget = slog.LevelInfo, MsgDegraded, l.info
		case v.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			level, msg, budget = slog.LevelInfo, MsgLimited, l.info
		case !debug:
			continue
		}
		if level != slog.LevelDebug && !l.log.Enabled(ctx, level) {
			continue
		}
		dropped, ok := budget.Take(now)
		if !ok {
			continue
		}
		l.log.LogAttrs(ctx, level, msg, rs.logAttrs(ctx, domain, i, v, dropped)...)
	}
}

func (rs *reqState) logAttrs(ctx context.Context, domain string, i int, v *Verdict, dropped int64) []slog.Attr {
	attrs := make([]slog.Attr, 0, 13)
	// ShouldRateLimit bounds no domain, and at debug even one without
	// rules is a line.
	attrs = append(attrs, slog.String(MetaDomain, logbudget.Clip(domain)))
	if v.Rule != nil {
		attrs = append(attrs, slog.String(MetaRule, v.Rule.Name))
	}
	attrs = append(attrs, slog.String(MetaResult, v.Result.String()), slog.String("code", v.Code.String()))
	if k := rs.keyHash(i); k != "" {
		attrs = append(attrs, slog.String(MetaKey, k))
	}
	if v.Rule != nil && !v.Rule.Unlimited {
		attrs = append(attrs, slog.Int64(MetaCost, v.Cost), slog.Int64(MetaRemaining, v.Remaining))
	}
	if v.Debt > 0 {
		attrs = append(attrs, slog.Int64(MetaDebt, v.Debt))
	}
	if v.Retry > 0 {
		attrs = append(attrs, slog.Duration(MetaRetryAfter, v.Retry))
	}
	if v.Reason != "" {
		attrs = append(attrs, slog.String(MetaReason, v.Reason))
	}
	if v.Degraded() {
		attrs = append(attrs, slog.Bool(MetaDegraded, true))
	}
	if dropped > 0 {
		attrs = append(attrs, slog.Int64("dropped", dropped))
	}
	if sp := trace.SpanContextFromContext(ctx); sp.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sp.TraceID().String()))
	}
	return attrs
}
