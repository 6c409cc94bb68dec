package candidate

import (
	"context"
	"log/slog"
)

// summarise logs, at most once per LogEvery, the requests compared and the
// disagreements since the last line, with the bucket that disagrees most.
// A quiet interval (nothing compared) logs nothing. The first interval
// starts when the candidate is first seen; the first request at or after
// an interval's end takes its line.
func (t *Tracker) summarise(st *state, now int64) {
	next := st.nextLog.Load()
	if now < next || !st.nextLog.CompareAndSwap(next, now+int64(t.opts.LogEvery)) {
		return
	}
	compared := st.window.Swap(0)
	if compared == 0 {
		return
	}
	attrs := []slog.Attr{
		slog.String(SourceKey, st.cand.Name()), slog.Int64("candidate_revision", st.cand.Revision()),
		slog.Uint64("requests", compared),
	}
	var total uint64
	for k := range numKinds {
		n := st.windowDisagree[k].Swap(0)
		total += n
		attrs = append(attrs, slog.Uint64(kindNames[k], n))
	}
	if top := st.top.snapshot(); len(top) > 0 {
		b := top[0]
		attrs = append(attrs, slog.Group("top_bucket", slog.String("domain", b.row.domain), slog.String("rule", b.row.rule),
			slog.String("policy", b.kind.Rejecter()), slog.String("bucket", string(b.hash[:])), slog.Uint64("disagreements", b.count)))
	}
	msg := "candidate policy agrees with the live one"
	if total > 0 {
		msg = "candidate policy disagrees with the live one"
	}
	t.opts.Logger.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
}
