package rlqs

// An emulated Envoy: the rate_limit_quota filter's client as Envoy's
// source has it (source/extensions/filters/http/rate_limit_quota:
// global_client_impl.cc, filter.cc), on a clock of its own.
//
//   - A request for a bucket it has not seen creates it, is decided by
//     no_assignment_behavior, and sends at once a report of that bucket
//     alone; then every reporting interval a report of every bucket.
//   - A token_bucket assignment is a bucket of max_tokens that starts full
//     and refills tokens_per_fill every fill_interval continuously; a new
//     assignment with an equal token bucket keeps the running one, any
//     other (or one after the last expired) starts a new, full one.
//   - An assignment expires assignment_time_to_live (whole seconds) after
//     it arrived; then expired_assignment_behavior decides.
//   - An abandon action forgets the bucket.
//
// Its token bucket is exact: tokens are kept in units of 1/interval-ns of
// a token, so no rounding favours either side.

import (
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

type envoyBucket struct {
	id              *rlqsv3.BucketId
	allowed, denied uint64
	action          *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction // nil: none, or expired
	expires         int64
	expired         bool // an assignment expired and no other came
	// The token bucket: level in tokens*interval, at last.
	max, perFill, interval int64
	level, last            int64
}

type envoy struct {
	domain      string
	noAssign    bool // no_assignment_behavior allows (ALLOW_ALL), else DENY_ALL
	expiredDeny bool // expired_assignment_behavior: DENY_ALL, else reverts to no_assignment_behavior
	interval    int64
	nextReport  int64
	buckets     map[string]*envoyBucket
	first       bool
	// send is the stream: a report out, the responses it gets.
	send func(*rlqsv3.RateLimitQuotaUsageReports) []*rlqsv3.RateLimitQuotaResponse
	// delay is how long a response takes to arrive; pending are those
	// on their way, applied in order once due.
	delay   int64
	pending []arrival
	// totals over the whole run; unassigned are the requests allowed by
	// no_assignment_behavior, which no lease paid for
	allowed, denied, unassigned uint64
}

type arrival struct {
	at   int64
	resp *rlqsv3.RateLimitQuotaResponse
}

// deliver applies the responses that have arrived by now.
func (e *envoy) deliver(now int64) {
	for len(e.pending) > 0 && e.pending[0].at <= now {
		e.receive(e.pending[0].at, e.pending[0].resp)
		e.pending = e.pending[1:]
	}
}

func newEnvoy(domain string, interval time.Duration, phase int64, send func(*rlqsv3.RateLimitQuotaUsageReports) []*rlqsv3.RateLimitQuotaResponse) *envoy {
	return &envoy{domain: domain, interval: int64(interval), nextReport: phase + int64(interval), buckets: make(map[string]*envoyBucket), first: true, send: send, expiredDeny: true}
}

// request decides one request of bucket id at now.
func (e *envoy) request(now int64, id map[string]string) bool {
	e.deliver(now)
	k := string(canonical(nil, id))
	b := e.buckets[k]
	if b == nil {
		b = &envoyBucket{id: &rlqsv3.BucketId{Bucket: id}}
		e.buckets[k] = b
		ok := e.noAssign
		e.count(b, ok)
		if ok {
			e.unassigned++
		}
		e.report(now, []*envoyBucket{b})
		return ok
	}
	ok, assigned := b.decide(now, e)
	e.count(b, ok)
	if ok && !assigned {
		e.unassigned++
	}
	return ok
}

func (e *envoy) count(b *envoyBucket, ok bool) {
	if ok {
		b.allowed++
		e.allowed++
	} else {
		b.denied++
		e.denied++
	}
}

// decide says whether the request is allowed, and whether an assignment
// decided it.
func (b *envoyBucket) decide(now int64, e *envoy) (ok, assigned bool) {
	if b.action != nil && now >= b.expires {
		b.action, b.expired = nil, true
	}
	switch {
	case b.action == nil && b.expired && e.expiredDeny:
		return false, false
	case b.action == nil:
		return e.noAssign, false
	}
	s := b.action.GetRateLimitStrategy()
	if s.GetTokenBucket() == nil {
		return s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL, true
	}
	b.level = min(b.max*b.interval, b.level+b.perFill*(now-b.last))
	b.last = now
	if b.level >= b.interval {
		b.level -= b.interval
		return true, true
	}
	return false, true
}

// tick sends the periodic reports due by now.
func (e *envoy) tick(now int64) {
	e.deliver(now)
	for now >= e.nextReport {
		bs := make([]*envoyBucket, 0, len(e.buckets))
		for _, b := range e.buckets {
			bs = append(bs, b)
		}
		e.report(e.nextReport, bs)
		e.nextReport += e.interval
	}
}

func (e *envoy) report(now int64, bs []*envoyBucket) {
	if len(bs) == 0 {
		return
	}
	msg := &rlqsv3.RateLimitQuotaUsageReports{}
	if e.first {
		msg.Domain, e.first = e.domain, false
	}
	for _, b := range bs {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: b.id, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied = 0, 0
	}
	for _, r := range e.send(msg) {
		e.pending = append(e.pending, arrival{now + e.delay, r})
	}
	e.deliver(now)
}

// receive applies a response that arrived at now.
func (e *envoy) receive(now int64, r *rlqsv3.RateLimitQuotaResponse) {
	for _, a := range r.GetBucketAction() {
		k := string(canonical(nil, a.GetBucketId().GetBucket()))
		b := e.buckets[k]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(e.buckets, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if b.action != nil && now >= b.expires {
			b.action = nil
		}
		b.expired = false
		if tb := qa.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			old := b.action.GetRateLimitStrategy().GetTokenBucket()
			if old == nil || !proto.Equal(old, tb) {
				b.max, b.perFill, b.interval = int64(tb.GetMaxTokens()), int64(tb.GetTokensPerFill().GetValue()), tb.GetFillInterval().AsDuration().Truncate(time.Second).Nanoseconds()
				b.level, b.last = b.max*b.interval, now
			}
		}
		b.action = qa
		b.expires = now + int64(qa.GetAssignmentTimeToLive().AsDuration().Truncate(time.Second))
	}
}
