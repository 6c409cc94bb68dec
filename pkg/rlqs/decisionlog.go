package rlqs

import (
	"log/slog"
	"time"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/service"
)

// Messages of the decision log (Options.DecisionLog), one line per action
// sent.
const (
	MsgAssigned  = "rlqs assignment"          // a token bucket (debug)
	MsgDenied    = "rlqs deny all"            // DENY_ALL: the bucket cannot pay for a lease (info)
	MsgDegraded  = "rlqs degraded assignment" // the store failed: on_store_error's answer (info)
	MsgAbandoned = "rlqs abandon"             // the bucket is forgotten (info)
)

// Why a token bucket is assigned (MetaWhy).
const (
	WhyNew     = "new"     // none was held: a new lease of the stream's share
	WhyRefresh = "refresh" // the one held, paid further ahead
	WhyRenew   = "renew"   // a new lease of the stream's share replaces the one held
	WhySmaller = "smaller" // a new lease below the share: the bucket pays no more
)

// Reasons of a DENY_ALL (service.MetaReason).
const (
	ReasonEmpty     = "the bucket cannot pay for a lease"
	ReasonNoShare   = "the other streams hold the rule's whole rate"
	ReasonBudgetEnd = "the budget's period ends within a second"
)

// Keys of the decision log's lines, beside service.MetaDomain, MetaRule,
// MetaKey and MetaReason.
const (
	MetaTokens       = "tokens"        // tokens per fill (and max tokens)
	MetaFillInterval = "fill_interval" // of the token bucket
	MetaTTL          = "ttl"           // the assignment's time to live
	MetaShare        = "share"         // the stream's share of tokens per fill
	MetaWhy          = "why"           // WhyNew, WhyRefresh, WhyRenew, WhySmaller
	MetaAction       = "action"        // what a degraded line sent: token_bucket, allow_all, deny_all
)

// decisionLog writes the decision log; nil when it is off. Each level has
// its budget of lines a second, as ShouldRateLimit's decision log.
type decisionLog struct {
	log         *slog.Logger
	keys        *keyhash.Key
	info, debug *logbudget.Budget
}

func newDecisionLog(o service.DecisionLog, keys *keyhash.Key) *decisionLog {
	if o.Logger == nil {
		return nil
	}
	if o.PerSecond <= 0 {
		o.PerSecond = 100
	}
	return &decisionLog{
		log: o.Logger, keys: keys,
		info:  logbudget.New(o.PerSecond, time.Second),
		debug: logbudget.New(o.PerSecond, time.Second),
	}
}

// hash names a new bucket in the lines: the keyed hash ShouldRateLimit's
// metadata and log give it; "" with the log off.
func (l *decisionLog) hash(key string) string {
	if l == nil {
		return ""
	}
	return l.keys.Hash([]byte(key))
}

// assigned logs a token bucket sent to sb (sh.mu).
func (l *decisionLog) assigned(sb *sub, share, ttl int64, why string, now int64) {
	if l == nil || !l.log.Enabled(sb.st.ctx, slog.LevelDebug) {
		return
	}
	dropped, ok := l.debug.Take(now)
	if !ok {
		return
	}
	attrs := append(l.bucketAttrs(sb, make([]slog.Attr, 0, 10)),
		slog.Int64(MetaTokens, sb.lease.k),
		slog.Duration(MetaFillInterval, time.Duration(sb.sh.fill.interval)),
		slog.Duration(MetaTTL, time.Duration(ttl)),
		slog.Int64(MetaShare, share),
		slog.String(MetaWhy, why))
	l.write(sb, slog.LevelDebug, MsgAssigned, attrs, dropped)
}

// infoLine logs msg about sb at info, with attrs after the bucket's.
func (l *decisionLog) infoLine(sb *sub, msg string, now int64, attrs ...slog.Attr) {
	if l == nil || !l.log.Enabled(sb.st.ctx, slog.LevelInfo) {
		return
	}
	dropped, ok := l.info.Take(now)
	if !ok {
		return
	}
	l.write(sb, slog.LevelInfo, msg, append(l.bucketAttrs(sb, make([]slog.Attr, 0, 6)), attrs...), dropped)
}

// bucketAttrs appends what names sb's bucket: the domain (clipped), the
// rule and the hashed key, never the key.
func (l *decisionLog) bucketAttrs(sb *sub, attrs []slog.Attr) []slog.Attr {
	attrs = append(attrs, slog.String(service.MetaDomain, logbudget.Clip(sb.st.domain)))
	if sb.rule != nil {
		attrs = append(attrs, slog.String(service.MetaRule, sb.rule.Name))
	}
	if sb.sh != nil {
		attrs = append(attrs, slog.String(service.MetaKey, sb.sh.hash))
	}
	return attrs
}

func (l *decisionLog) write(sb *sub, level slog.Level, msg string, attrs []slog.Attr, dropped int64) {
	if dropped > 0 {
		attrs = append(attrs, logbudget.Dropped(dropped))
	}
	l.log.LogAttrs(sb.st.ctx, level, msg, attrs...)
}
