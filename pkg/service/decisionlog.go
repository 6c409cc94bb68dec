package service

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
)

// DecisionLog configures the log of decisions (Options.DecisionLog): each
// descriptor limited or degraded is a line at info, every other decision a
// line at debug. Each level has its own budget of lines per second, so a
// flood of refusals costs a few lines, and the first line after some were
// dropped says how many ("dropped").
type DecisionLog struct {
	// Logger receives the lines; nil: no decision log.
	Logger *slog.Logger
	// PerSecond is the most lines of each level a second [100].
	PerSecond int
}

// Messages of the decision log.
const (
	MsgLimited  = "rate limited"    // an OVER_LIMIT descriptor (info)
	MsgDegraded = "degraded answer" // on_store_error allowed it (info)
	MsgDecision = "decision"        // anything else (debug)
)

// decisionLog writes the decision log; nil when it is off.
type decisionLog struct {
	log         *slog.Logger
	info, debug lineBudget
}

func newDecisionLog(o DecisionLog) *decisionLog {
	if o.Logger == nil {
		return nil
	}
	if o.PerSecond <= 0 {
		o.PerSecond = 100
	}
	l := &decisionLog{log: o.Logger}
	l.info.init(o.PerSecond, time.Second)
	l.debug.init(o.PerSecond, time.Second)
	return l
}

// write logs the verdicts of one request. With nothing limited or degraded
// and debug off it only asks the handler whether debug is on.
func (l *decisionLog) write(ctx context.Context, now int64, domain string, sc *scratch, vs []Verdict) {
	debug := l.log.Enabled(ctx, slog.LevelDebug)
	for i := range vs {
		v := &vs[i]
		level, msg, budget := slog.LevelDebug, MsgDecision, &l.debug
		switch {
		case v.Result == ResultRequestID:
			continue
		case v.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			level, msg, budget = slog.LevelInfo, MsgLimited, &l.info
		case v.Degraded():
			level, msg, budget = slog.LevelInfo, MsgDegraded, &l.info
		case !debug:
			continue
		}
		if level != slog.LevelDebug && !l.log.Enabled(ctx, level) {
			continue
		}
		dropped, ok := budget.take(now)
		if !ok {
			continue
		}
		l.log.LogAttrs(ctx, level, msg, sc.logAttrs(ctx, domain, i, v, dropped)...)
	}
}

func (sc *scratch) logAttrs(ctx context.Context, domain string, i int, v *Verdict, dropped int64) []slog.Attr {
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String(MetaDomain, domain))
	if v.Rule != nil {
		attrs = append(attrs, slog.String(MetaRule, v.Rule.Name))
	}
	attrs = append(attrs, slog.String(MetaResult, v.Result.String()), slog.String("code", v.Code.String()))
	if k := sc.keyHash(i); k != "" {
		attrs = append(attrs, slog.String(MetaKey, k))
	}
	if v.Rule != nil && !v.Rule.Unlimited {
		attrs = append(attrs, slog.Int64(MetaCost, v.Cost), slog.Int64(MetaRemaining, v.Remaining))
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

// lineBudget lets at most per lines through in each interval of the clock
// (instants are clock.Clock readings, intervals aligned on its zero) and
// counts the lines it drops. It is safe for concurrent use and takes no
// lock: the interval and its count are one atomic word.
type lineBudget struct {
	per     uint64
	every   int64
	state   atomic.Uint64 // interval number << countBits | lines let through in it
	dropped atomic.Int64  // since the last line let through
}

const countBits = 24

func (b *lineBudget) init(per int, every time.Duration) {
	b.per, b.every = uint64(min(per, 1<<countBits-1)), int64(every)
}

// take reports whether a line may go out at now and, if so, how many were
// dropped since the last one that did.
func (b *lineBudget) take(now int64) (dropped int64, ok bool) {
	// Only equality of interval numbers matters: a truncated one is fine.
	interval := uint64(now/b.every) << countBits
	for {
		st := b.state.Load()
		next := interval | 1
		if st&^(1<<countBits-1) == interval {
			if st&(1<<countBits-1) >= b.per {
				b.dropped.Add(1)
				return 0, false
			}
			next = st + 1
		}
		if b.state.CompareAndSwap(st, next) {
			return b.dropped.Swap(0), true
		}
	}
}
