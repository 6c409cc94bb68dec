package rlqs

import (
	"context"
	"time"
)

// Tick does what no report triggers: it takes a new policy to every
// stream, drops from the shares the subscriptions that have not reported
// for a TTL and the delivery slack (their leases end; what they hold is
// paid), and abandons the buckets that saw no request for AbandonAfter,
// forgetting them. now is the injected clock's.
func (s *Service) Tick(now int64) {
	s.syncPolicy(now)
	var gone []pending
	s.mu.Lock()
	for st := range s.streams {
		for k, sb := range st.subs {
			switch {
			case now-sb.lastUsage.Load() > int64(s.opts.AbandonAfter):
				s.unsubscribe(sb)
				delete(st.subs, k)
				gone = append(gone, pending{sb, s.abandoned(sb, now)})
			case sb.sh != nil && now-sb.lastReport.Load() > s.ahead:
				sb.sh.mu.Lock()
				sb.silent, sb.lease, sb.weight = true, lease{}, 0
				sb.sh.mu.Unlock()
			}
		}
	}
	s.mu.Unlock()
	s.push(gone)
}

// Run calls Tick every interval until ctx ends, and then ends every
// stream (StreamRateLimitQuotas). Call it once.
func (s *Service) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			close(s.stopping)
			return
		case <-t.C:
			s.Tick(s.opts.Clock.Now())
		}
	}
}
