package rlqs

// Subscriptions: a stream's subscription to a bucket is made on its first
// report of the BucketId, matched under the policy now held, and made
// again when the policy changes (syncPolicy).

import (
	"log/slog"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/policy"
)

// subscribe finds (or makes) the subscription of each usage, in
// st.order; the stream's first message names its domain.
func (s *Service) subscribe(st *stream, domain string, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st.domain == "" && domain == "":
		s.m.refused.WithLabelValues(refusedInvalid).Inc()
		return status.Error(codes.InvalidArgument, "rlqs: the stream's first report has no domain")
	case st.domain == "":
		st.domain = domain
	case domain != "" && domain != st.domain:
		s.m.refused.WithLabelValues(refusedDomain).Inc()
		return status.Errorf(codes.InvalidArgument, "rlqs: a report for domain %q on a stream of domain %q (open a stream per domain)", domain, st.domain)
	}
	st.order = st.order[:0]
	fresh := 0
	for _, u := range usages {
		st.buf = canonical(st.buf[:0], u.GetBucketId().GetBucket())
		if _, ok := st.subs[string(st.buf)]; !ok {
			fresh++
		}
	}
	if n := len(st.subs) + fresh; n > s.opts.MaxBucketsPerStream {
		s.m.refused.WithLabelValues(refusedBuckets).Inc()
		return status.Errorf(codes.ResourceExhausted, "rlqs: the stream would subscribe %d buckets, more than a stream may (%d, --rlqs-max-buckets-per-stream)", n, s.opts.MaxBucketsPerStream)
	}
	for _, u := range usages {
		st.buf = canonical(st.buf[:0], u.GetBucketId().GetBucket())
		sb, ok := st.subs[string(st.buf)]
		if !ok {
			sb = s.newSub(st, u.GetBucketId(), now)
			st.subs[string(st.buf)] = sb
		}
		st.order = append(st.order, sb)
	}
	return nil
}

// newSub resolves a BucketId under the policy now held (s.mu).
func (s *Service) newSub(st *stream, id *rlqsv3.BucketId, now int64) *sub {
	rule, entries := s.ord.match(st.domain, id.GetBucket())
	sb := &sub{st: st, id: id, rule: rule}
	sb.lastReport.Store(now)
	sb.lastUsage.Store(now)
	if rule != nil && rule.HasBucket() {
		key := string(rule.AppendKey(nil, entries))
		sh := s.buckets[key]
		if sh == nil {
			sh = &shared{key: key, hash: s.dlog.hash(key), entries: entries, rule: rule, revision: s.pol.Revision(), fill: fillOfRule(rule)}
			s.buckets[key] = sh
		}
		sb.sh = sh
		sh.mu.Lock()
		sh.subs = append(sh.subs, sb)
		sh.mu.Unlock()
	}
	sb.c = s.countersOf(st.domain, rule)
	sb.c.subscriptions.Inc()
	switch {
	case rule != nil && rule.Deny:
		sb.action, sb.kind = s.blanket(sb.id, typev3.RateLimitStrategy_DENY_ALL), actionDenyAll
	case sb.sh == nil || rule.Shadow:
		sb.action, sb.kind = s.blanket(sb.id, typev3.RateLimitStrategy_ALLOW_ALL), actionAllowAll
	}
	return sb
}

// unsubscribe takes sb out of its bucket's shares, and forgets a bucket
// nobody subscribes any more (s.mu).
func (s *Service) unsubscribe(sb *sub) {
	sb.c.subscriptions.Dec()
	sh := sb.sh
	if sh == nil {
		return
	}
	sh.mu.Lock()
	for i, o := range sh.subs {
		if o == sb {
			sh.subs = append(sh.subs[:i], sh.subs[i+1:]...)
			sb.detached = true
			break
		}
	}
	empty := len(sh.subs) == 0
	sh.mu.Unlock()
	if empty && s.buckets[sh.key] == sh {
		delete(s.buckets, sh.key)
	}
}

// countersOf returns the metrics of (domain, rule), made once (s.mu).
func (s *Service) countersOf(domain string, rule *policy.Rule) *ruleCounters {
	labels := [2]string{labelUnknownDomain, labelNoRule}
	if s.pol.Rules(domain) != nil {
		labels[0] = domain
	}
	if rule != nil {
		labels[1] = rule.Name
	}
	if c := s.counters[labels]; c != nil {
		return c
	}
	d, r := labels[0], labels[1]
	c := &ruleCounters{
		subscriptions: s.m.subscriptions.WithLabelValues(d, r),
		allowed:       s.m.reported.WithLabelValues(d, r, "allowed"),
		denied:        s.m.reported.WithLabelValues(d, r, "denied"),
		tokenBucket:   s.m.actions.WithLabelValues(d, r, actionTokenBucket),
		allowAll:      s.m.actions.WithLabelValues(d, r, actionAllowAll),
		denyAll:       s.m.actions.WithLabelValues(d, r, actionDenyAll),
		abandon:       s.m.actions.WithLabelValues(d, r, actionAbandon),
		leased:        s.m.leased.WithLabelValues(d, r),
		over:          s.m.overage.WithLabelValues(d, r),
		forgiven:      s.m.forgiven.WithLabelValues(d, r),
	}
	s.counters[labels] = c
	return c
}

// syncPolicy resolves every subscription again when the policy serving
// is not the one they were resolved under, and sends every stream its
// new assignments at once. The first call only takes the policy.
func (s *Service) syncPolicy(now int64) {
	p := s.opts.Policy()
	s.mu.Lock()
	if p == s.pol {
		s.mu.Unlock()
		return
	}
	first := s.pol == nil
	s.pol, s.ord = p, newOrders(p)
	if first {
		s.mu.Unlock()
		return
	}
	// The new policy's subscriptions share new buckets (its rules and
	// fills), also where a bucket's key is the same: the old ones go
	// with their last subscription.
	s.buckets = make(map[string]*shared, len(s.buckets))
	var moved []*sub
	for st := range s.streams {
		for k, old := range st.subs {
			s.unsubscribe(old)
			sb := s.newSub(st, old.id, now)
			sb.lastReport.Store(old.lastReport.Load())
			sb.lastUsage.Store(old.lastUsage.Load())
			st.subs[k] = sb
			moved = append(moved, sb)
		}
	}
	s.mu.Unlock()
	var ps []pending
	for _, sb := range moved {
		ps = s.assign(sb, now, ps)
	}
	s.push(ps)
}

// push sends each stream its pending actions, one response a stream. A
// stream whose send fails learns it on its own.
func (s *Service) push(ps []pending) {
	if len(ps) == 0 {
		return
	}
	by := make(map[*stream][]*action)
	for _, p := range ps {
		by[p.sb.st] = append(by[p.sb.st], p.a)
	}
	for st, actions := range by {
		resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: actions}
		st.sendMu.Lock()
		s.mu.Lock()
		closed := st.closed
		s.mu.Unlock()
		if !closed {
			if err := st.send(resp); err != nil {
				s.opts.Logger.Debug("rlqs: push not sent", slog.String("error", err.Error()))
			}
		}
		st.sendMu.Unlock()
	}
}
