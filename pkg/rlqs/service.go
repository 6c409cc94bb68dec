package rlqs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Defaults of Options.
const (
	DefaultReportingInterval   = time.Second
	DefaultTTLIntervals        = 2
	DefaultDeliverySlack       = 250 * time.Millisecond
	DefaultAbandonAfter        = 30 * time.Second
	DefaultMaxStreams          = 1024
	DefaultMaxBucketsPerStream = 10000
)

// Options configure a Service. Policy, Store and Registerer are required.
type Options struct {
	// Policy returns the policy now serving.
	Policy     func() *policy.Policy
	Store      store.Store
	Registerer prometheus.Registerer
	Clock      clock.Clock  // [monotonic clock]
	Logger     *slog.Logger // [slog.Default()]

	// ReportingInterval is the reporting_interval of the Envoys' filters
	// [1s]. An assignment lives TTLIntervals of them [2], rounded up to
	// whole seconds (Envoy reads only the seconds), and its lease is paid
	// that long ahead plus DeliverySlack [250ms], the longest a response
	// may take to reach Envoy without any overshoot.
	ReportingInterval time.Duration
	TTLIntervals      int
	DeliverySlack     time.Duration
	// AbandonAfter is how long a bucket may go without a request (allowed
	// or denied) before it is abandoned and forgotten [30s].
	AbandonAfter time.Duration
	// MaxStreams is the most streams this replica holds open at once
	// [1024]; MaxBucketsPerStream the most buckets one stream subscribes,
	// and so reports in one message [10000].
	MaxStreams          int
	MaxBucketsPerStream int
}

// Service is the RLQS server. It is safe for concurrent use.
//
// Locks, always taken in this order, never the reverse: a stream's
// sendMu (held from a message's first subscription to its response
// sent, so that what a stream is sent keeps the order it was decided
// in), then Service.mu (streams, subscriptions, the bucket registry and
// the policy they were resolved under), then a shared bucket's mu (its
// subscriptions' leases and ledgers; store calls are made under it
// alone).
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	opts  Options
	m     *rlqsMetrics
	ttl   int64 // ns, whole seconds
	ahead int64 // ttl + slack: how far ahead a lease is paid

	mu       sync.Mutex
	pol      *policy.Policy
	ord      *orders
	streams  map[*stream]struct{}
	buckets  map[string]*shared
	counters map[[2]string]*ruleCounters
}

// stream is one open RLQS stream.
type stream struct {
	ctx    context.Context // the stream's: its store calls end with it
	send   func(*rlqsv3.RateLimitQuotaResponse) error
	sendMu sync.Mutex
	// resp is the response to the message being answered, reused (sendMu).
	resp rlqsv3.RateLimitQuotaResponse

	domain string          // Service.mu; "" until the first message
	subs   map[string]*sub // by canonical BucketId; Service.mu
	order  []*sub          // scratch of the message being answered (sendMu)
	pushes []pending       // actions for other streams it caused (sendMu)
	buf    []byte          // scratch for canonical ids (sendMu)
	closed bool            // Service.mu
}

// sub is one stream's subscription to one bucket. A policy change makes
// new subs; a sub's rule and shared bucket never change.
type sub struct {
	st   *stream
	id   *rlqsv3.BucketId
	rule *policy.Rule // nil: no rule limits it
	sh   *shared      // nil: no bucket (no rule, unlimited, not_limited, deny)
	c    *ruleCounters

	lastReport, lastUsage atomic.Int64

	// Under sh.mu.
	lease      lease
	weight     int64 // demand in the last report
	silent     bool  // no report for longer than a TTL: out of the shares
	detached   bool  // unsubscribed: a report still in flight gets an abandon
	paid, used int64 // the ledger: tokens taken for it, requests it reported allowed
	// action is the last action sent, reused while it holds (never
	// changed once built: a response being sent may hold it); kind is
	// its metrics label. For a sub without a bucket both are set once.
	action *rlqsv3.RateLimitQuotaResponse_BucketAction
	kind   string
}

// shared is one tokengate bucket with subscriptions.
type shared struct {
	key      string
	rule     *policy.Rule
	revision int64
	fill     fill

	mu      sync.Mutex
	subs    []*sub
	weights []int64 // scratch of shares
	shares  []int64 // scratch of shares, one per subs
	pushes  []pending
	req     store.Request
	results [1]store.Result
}

// pending is an action for a stream other than the one being answered.
type pending struct {
	sb *sub
	a  *action
}

// ruleCounters are the metrics of one (domain, rule).
type ruleCounters struct {
	subscriptions                   prometheus.Gauge
	allowed, denied                 prometheus.Counter
	tokenBucket, allowAll, denyAll  prometheus.Counter
	abandon, leased, over, forgiven prometheus.Counter
}

// New returns a Service serving no stream yet.
func New(opts Options) (*Service, error) {
	if opts.Policy == nil || opts.Store == nil || opts.Registerer == nil {
		return nil, errors.New("rlqs: Policy, Store and Registerer are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&opts.ReportingInterval, DefaultReportingInterval)
	defDur(&opts.DeliverySlack, DefaultDeliverySlack)
	defDur(&opts.AbandonAfter, DefaultAbandonAfter)
	def(&opts.TTLIntervals, DefaultTTLIntervals)
	def(&opts.MaxStreams, DefaultMaxStreams)
	def(&opts.MaxBucketsPerStream, DefaultMaxBucketsPerStream)
	ttl := (time.Duration(opts.TTLIntervals)*opts.ReportingInterval + time.Second - 1).Truncate(time.Second)
	return &Service{
		opts: opts, m: newMetrics(opts.Registerer),
		ttl: int64(ttl), ahead: int64(ttl + opts.DeliverySlack),
		streams: make(map[*stream]struct{}), buckets: make(map[string]*shared), counters: make(map[[2]string]*ruleCounters),
	}, nil
}

// TTL is the assignment_time_to_live of every assignment.
func (s *Service) TTL() time.Duration { return time.Duration(s.ttl) }

// StreamRateLimitQuotas serves one Envoy's stream: every usage report is
// answered, in one response, with an action for each of its buckets.
func (s *Service) StreamRateLimitQuotas(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st, err := s.open(gs.Context(), gs.Send)
	if err != nil {
		return err
	}
	defer s.close(st)
	for {
		msg, err := gs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.answer(st, msg); err != nil {
			return err
		}
	}
}

func (s *Service) open(ctx context.Context, send func(*rlqsv3.RateLimitQuotaResponse) error) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.streams) >= s.opts.MaxStreams {
		s.m.refused.WithLabelValues(refusedStreams).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: this replica has %d streams open, the most it takes (--rlqs-max-streams)", len(s.streams))
	}
	st := &stream{ctx: ctx, send: send, subs: make(map[string]*sub)}
	s.streams[st] = struct{}{}
	s.m.streams.Inc()
	return st, nil
}

// close forgets a stream and its subscriptions.
func (s *Service) close(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sb := range st.subs {
		s.unsubscribe(sb)
		delete(st.subs, k)
	}
	st.closed = true
	delete(s.streams, st)
	s.m.streams.Dec()
}

// answer handles one message: it checks it whole (a bad one changes
// nothing and ends the stream with the reason), charges its reports and
// sends an action for each of its buckets.
func (s *Service) answer(st *stream, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	usages := msg.GetBucketQuotaUsages()
	if n := len(usages); n > s.opts.MaxBucketsPerStream {
		s.m.refused.WithLabelValues(refusedBuckets).Inc()
		return status.Errorf(codes.ResourceExhausted, "rlqs: a report of %d buckets, more than a stream may subscribe (%d, --rlqs-max-buckets-per-stream)", n, s.opts.MaxBucketsPerStream)
	}
	for i, u := range usages {
		if err := checkBucketID(u.GetBucketId().GetBucket()); err != nil {
			s.m.refused.WithLabelValues(refusedInvalid).Inc()
			return status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: %v", i, err)
		}
	}
	now := s.opts.Clock.Now()
	s.syncPolicy(now) // before sendMu: it may push to this stream too
	st.sendMu.Lock()
	if err := s.subscribe(st, msg.GetDomain(), usages, now); err != nil {
		st.sendMu.Unlock()
		return err
	}
	st.resp.BucketAction = st.resp.BucketAction[:0]
	for i, u := range usages {
		st.resp.BucketAction = append(st.resp.BucketAction, s.report(st.order[i], u, now))
	}
	clear(st.order)
	err := st.send(&st.resp)
	pushes := st.pushes
	st.pushes = nil
	st.sendMu.Unlock()
	// Other streams' new assignments go out once this one's sendMu is
	// free: two streams pushing to each other never wait on each other.
	s.push(pushes)
	s.m.messages.Inc()
	return err
}

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
			sh = &shared{key: key, rule: rule, revision: s.pol.Revision(), fill: fillOf(rule.Version.Params.Rate(), rule.Cost)}
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
