package rlqs

// Reports and assignments. An assignment is a lease: what Envoy may spend
// under it is taken from the shared bucket, as a pre-paid decision of the
// store, before Envoy can spend it (lease.go). A report is counted against
// what its subscription has paid (the ledger: paid, used), and only the
// requests Envoy allowed beyond it (before its first assignment, after one
// expired, under a shadow rule's ALLOW_ALL) are charged, as post-paid
// usage: store.Report, never refused, down to the rule's max_debt; on a
// pre-paid rule (max_debt 0) down to zero, the rest forgiven and counted.

import (
	"errors"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
)

type action = rlqsv3.RateLimitQuotaResponse_BucketAction

// report counts one usage report of sb, charges its overage and returns
// sb's next action.
func (s *Service) report(sb *sub, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now int64) *action {
	allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
	sb.c.allowed.Add(float64(allowed))
	sb.c.denied.Add(float64(denied))
	prev := sb.lastReport.Swap(now)
	if allowed > 0 || denied > 0 {
		sb.lastUsage.Store(now)
	}
	sh := sb.sh
	if sh == nil {
		return s.sent(sb)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sb.detached {
		return s.abandoned(sb, now)
	}
	sb.silent = false
	sb.weight = s.demand(allowed, denied, now-prev)
	sb.used = satAdd(sb.used, allowed)
	s.chargeOverage(sh, sb, now)
	if sh.rule.Charge == policy.EveryHit {
		s.chargeDenied(sh, sb, denied, now)
	}
	a := s.grant(sh, sb, now)
	if len(sh.pushes) > 0 {
		sb.st.pushMu.Lock()
		sb.st.pushes = append(sb.st.pushes, sh.pushes...)
		sb.st.pushMu.Unlock()
		sh.pushes = sh.pushes[:0]
	}
	return a
}

// reportAll answers each usage of a message in st.resp, at the same
// index, Options.Concurrency of them at once (st.sendMu).
func (s *Service) reportAll(st *stream, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now int64) {
	workers := min(s.opts.Concurrency, len(usages))
	if workers <= 1 {
		for i, u := range usages {
			st.resp.BucketAction[i] = s.report(st.order[i], u, now)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(usages); i = int(next.Add(1) - 1) {
				st.resp.BucketAction[i] = s.report(st.order[i], usages[i], now)
			}
		})
	}
	wg.Wait()
}

// demand is a report's requests per reporting interval: elapsed since the
// last report (the first is sent as a bucket is made), at most maxWeight.
func (s *Service) demand(allowed, denied uint64, elapsed int64) int64 {
	n := min(allowed, maxWeight) + min(denied, maxWeight)
	interval := uint64(s.opts.ReportingInterval)
	if elapsed < int64(time.Millisecond) || elapsed > int64(interval) {
		elapsed = int64(interval) // a first report, or one late: as counted
	}
	hi, lo := bits.Mul64(n, interval)
	// n < 2^41 and interval <= 1h < 2^42 (New), so hi < 2^19 < 1ms <= elapsed.
	q, _ := bits.Div64(hi, lo, uint64(elapsed))
	return int64(min(q, maxWeight))
}

// assign appends sb's action now, without a report (after a policy
// change), and those of the others it moves, to ps.
func (s *Service) assign(sb *sub, now int64, ps []pending) []pending {
	sh := sb.sh
	if sh == nil {
		return append(ps, pending{sb, s.sent(sb)})
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sb.detached {
		return ps
	}
	ps = append(ps, pending{sb, s.grant(sh, sb, now)})
	ps = append(ps, sh.pushes...)
	sh.pushes = sh.pushes[:0]
	return ps
}

// chargeOverage charges what sb reported allowed beyond what it has paid,
// as a report (sh.mu).
func (s *Service) chargeOverage(sh *shared, sb *sub, now int64) {
	over := sb.used - sb.paid
	if over <= 0 {
		return
	}
	_, err := s.decide(sb.st.ctx, sh, store.Report, over, now)
	switch {
	case errors.Is(err, store.ErrInvalid):
		// A store that cannot take reports (the Redis store before it
		// decided post-paid items): what Envoy spent beyond its leases
		// is forgiven, and said so.
		s.m.storeErrors.Inc()
		sb.c.forgiven.Add(float64(over) * float64(sh.fill.unit))
	case err != nil:
		s.m.storeErrors.Inc()
		return // charged with the next report
	default:
		sb.c.forgiven.Add(float64(sh.forgiven()))
	}
	sb.c.over.Add(float64(over) * float64(sh.fill.unit))
	sb.paid = sb.used
}

// chargeDenied charges, on a rule charged every hit, the requests Envoy
// denied, as a report (sh.mu): ShouldRateLimit charges a refused hit of
// such a rule too, down to -max_debt, so a client that keeps sending
// while over the limit stays refused until it pauses, through either
// protocol. A store that fails leaves them uncharged.
func (s *Service) chargeDenied(sh *shared, sb *sub, denied uint64, now int64) {
	if _, err := s.decide(sb.st.ctx, sh, store.Report, int64(min(denied, math.MaxInt64)), now); err != nil {
		s.m.storeErrors.Inc()
		return
	}
	sb.c.forgiven.Add(float64(sh.forgiven()))
}

// grant decides sb's assignment at now (sh.mu): its share of the rule's
// rate, leased from the bucket for a TTL and the delivery slack ahead.
func (s *Service) grant(sh *shared, sb *sub, now int64) *action {
	if sh.rule.Shadow {
		return s.sent(sb) // ALLOW_ALL, its reports charged as usage
	}
	return s.leaseTo(sh, sb, s.target(sh, sb, now), false, now)
}

// leaseTo leases sb a token bucket of target tokens per fill (sh.mu): the
// one it holds, paid further ahead, while it is close to target; else a
// new one (forced, or none is held, or it is far from target). When the
// bucket cannot pay for that, sb keeps the one it holds if the bucket
// pays for it, or gets a smaller new one the balance pays, or DENY_ALL.
func (s *Service) leaseTo(sh *shared, sb *sub, target int64, force bool, now int64) *action {
	ttl := s.leaseTTL(sh, now)
	switch {
	case target == 0:
		return s.denied(sb, ReasonNoShare, now)
	case ttl == 0:
		return s.denied(sb, ReasonBudgetEnd, now)
	}
	live := sb.lease.k > 0 && now < sb.lease.expires
	why := WhyNew
	if live {
		why = WhyRenew
	}
	var ok bool
	var err error
	if !force && live && !worthChanging(sb.lease.k, target) {
		ok, err = s.extend(sh, sb, ttl, now)
		why = WhyRefresh
	} else if ok, err = s.renew(sh, sb, target, ttl, now); err == nil && !ok && !force && live {
		ok, err = s.extend(sh, sb, ttl, now)
		why = WhyRefresh
	}
	if err == nil && !ok {
		available := sh.remaining()/sh.fill.unit + sb.lease.unspent(sh.fill, now+int64(s.opts.DeliverySlack))
		if k := affordable(sh.fill, available, ttl+int64(s.opts.DeliverySlack), target); k > 0 {
			ok, err = s.renew(sh, sb, k, ttl, now)
			why = WhySmaller
		}
	}
	switch {
	case err != nil:
		return s.storeFailed(sh, sb, now)
	case !ok:
		return s.denied(sb, ReasonEmpty, now)
	}
	l := sb.lease
	if tb := sb.action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); sb.kind != actionTokenBucket ||
		int64(tb.GetMaxTokens()) != l.m || int64(tb.GetTokensPerFill().GetValue()) != l.k ||
		sb.action.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration() != time.Duration(ttl) {
		sb.action, sb.kind = tokenBucket(sb.id, l, sh.fill, ttl), actionTokenBucket
	}
	s.dlog.assigned(sb, target, ttl, why, now)
	return s.sent(sb)
}

// extend pays sb's lease ahead to now + ttl + slack (sh.mu).
func (s *Service) extend(sh *shared, sb *sub, ttl, now int64) (bool, error) {
	cost := sb.lease.rateCost(sh.fill, now+ttl+int64(s.opts.DeliverySlack))
	ok, err := s.decide(sb.st.ctx, sh, store.Prepaid, cost, now)
	if ok && err == nil {
		sb.lease.paidRate += cost
		sb.lease.expires = now + ttl
		s.paid(sb, cost)
	}
	return ok, err
}

// renew pays a new lease of k tokens per fill living ttl, for its full
// burst and its refill ahead (sh.mu). It replaces the one sb holds when it reaches
// Envoy, by now + slack: the old refill paid beyond that is never spent,
// and pays for the new one.
func (s *Service) renew(sh *shared, sb *sub, k, ttl, now int64) (bool, error) {
	credit := sb.lease.unspent(sh.fill, now+int64(s.opts.DeliverySlack))
	l := lease{k: k, m: k, start: now, expires: now + ttl}
	cost := max(0, l.m+l.rateCost(sh.fill, now+ttl+int64(s.opts.DeliverySlack))-credit)
	ok, err := s.decide(sb.st.ctx, sh, store.Prepaid, cost, now)
	if ok && err == nil {
		l.paidRate = credit + cost - l.m
		sb.lease = l
		s.paid(sb, cost)
	}
	return ok, err
}

// paid books cost taken from the bucket for sb (sh.mu).
func (s *Service) paid(sb *sub, cost int64) {
	sb.paid = satAdd(sb.paid, uint64(cost))
	sb.c.leased.Add(float64(cost) * float64(sb.sh.fill.unit))
}

// target is sb's share of the rule's tokens per fill among the bucket's
// subscriptions that report, at most what the others do not hold (sh.mu).
// When that is less than sb's floor (a stream that has just subscribed),
// the others that hold more than their shares are given their shares
// first, at once: their new assignments wait in sh.pushes to be sent.
// Otherwise sb grows as the others shrink on their own reports.
func (s *Service) target(sh *shared, sb *sub, now int64) int64 {
	total := sh.fill.tokens
	want, others := s.shares(sh, sb)
	if total-others < min(want, floorShare(total, int64(len(sh.weights)))) {
		for i, o := range sh.subs {
			if o != sb && !o.silent && o.lease.k > sh.shares[i] {
				sh.pushes = append(sh.pushes, pending{o, s.leaseTo(sh, o, sh.shares[i], true, now)})
			}
		}
		want, others = s.shares(sh, sb)
	}
	return max(0, min(want, total-others))
}

// shares puts in sh.shares the share of each subscription (0 for a silent
// one) and returns sb's and what the others hold (sh.mu).
func (s *Service) shares(sh *shared, sb *sub) (want, others int64) {
	sh.weights = sh.weights[:0]
	for _, o := range sh.subs {
		if !o.silent || o == sb {
			sh.weights = append(sh.weights, o.weight)
		}
	}
	sh.shares = sh.shares[:0]
	j := 0
	for _, o := range sh.subs {
		if o.silent && o != sb {
			sh.shares = append(sh.shares, 0)
			continue
		}
		sh.shares = append(sh.shares, share(sh.fill.tokens, sh.weights, j))
		j++
		if o == sb {
			want = sh.shares[len(sh.shares)-1]
		} else {
			others += o.lease.k
		}
	}
	return want, others
}

// storeFailed answers for a store that failed (sh.mu), a line of the
// decision log: the rule's on_store_error allow is ALLOW_ALL; otherwise
// the lease held goes on for as long as it is paid, and then DENY_ALL.
func (s *Service) storeFailed(sh *shared, sb *sub, now int64) *action {
	s.m.storeErrors.Inc()
	a := s.degraded(sh, sb, now)
	s.dlog.infoLine(sb, MsgDegraded, now, slog.String(MetaAction, sb.kind))
	return a
}

func (s *Service) degraded(sh *shared, sb *sub, now int64) *action {
	if sh.rule.OnStoreError == policy.StoreErrorAllow {
		sb.lease = lease{}
		if sb.kind != actionAllowAll {
			sb.action, sb.kind = s.blanket(sb.id, typev3.RateLimitStrategy_ALLOW_ALL), actionAllowAll
		}
		return s.sent(sb)
	}
	l := sb.lease
	if ttl := (l.covered(sh.fill) - int64(s.opts.DeliverySlack) - now) / int64(time.Second) * int64(time.Second); l.k > 0 && now < l.expires && ttl > 0 {
		l.expires = now + ttl
		sb.lease = l
		sb.action, sb.kind = tokenBucket(sb.id, l, sh.fill, ttl), actionTokenBucket
		return s.sent(sb)
	}
	return s.deny(sb)
}

// denied is deny, a line of the decision log: the bucket gives sb
// nothing, for reason.
func (s *Service) denied(sb *sub, reason string, now int64) *action {
	s.dlog.infoLine(sb, MsgDenied, now, slog.String(service.MetaReason, reason))
	return s.deny(sb)
}

// deny ends sb's lease and sends DENY_ALL (sh.mu).
func (s *Service) deny(sb *sub) *action {
	sb.lease = lease{}
	if sb.kind != actionDenyAll {
		sb.action, sb.kind = s.blanket(sb.id, typev3.RateLimitStrategy_DENY_ALL), actionDenyAll
	}
	return s.sent(sb)
}

// sent counts sb's action, about to be sent, and returns it.
func (s *Service) sent(sb *sub) *action {
	switch sb.kind {
	case actionTokenBucket:
		sb.c.tokenBucket.Inc()
	case actionAllowAll:
		sb.c.allowAll.Inc()
	case actionDenyAll:
		sb.c.denyAll.Inc()
	}
	return sb.action
}

// abandoned counts, logs and returns the abandon action of sb.
func (s *Service) abandoned(sb *sub, now int64) *action {
	sb.c.abandon.Inc()
	s.dlog.infoLine(sb, MsgAbandoned, now)
	return &action{BucketId: sb.id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
		AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
	}}
}

func tokenBucket(id *rlqsv3.BucketId, l lease, f fill, ttl int64) *action {
	return &action{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(time.Duration(ttl)),
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens:     uint32(l.m),
				TokensPerFill: wrapperspb.UInt32(uint32(l.k)),
				FillInterval:  durationpb.New(time.Duration(f.interval)),
			}}},
		},
	}}
}

func (s *Service) blanket(id *rlqsv3.BucketId, rule typev3.RateLimitStrategy_BlanketRule) *action {
	return &action{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(time.Duration(s.ttl)),
			RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}},
		},
	}}
}

// satAdd is a + b, at most math.MaxInt64.
func satAdd(a int64, b uint64) int64 {
	if b > uint64(math.MaxInt64-a) {
		return math.MaxInt64
	}
	return a + int64(b)
}
