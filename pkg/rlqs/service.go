package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
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
	// DecisionLog is the log of the actions sent (decisionlog.go), with
	// ShouldRateLimit's budgets of lines a second; a nil Logger: none.
	DecisionLog service.DecisionLog
	// KeyHash names a bucket in the decision log, as ShouldRateLimit's
	// metadata and log name it given the same key (service.Options.KeyHash)
	// [keyhash.Random()].
	KeyHash *keyhash.Key

	// ReportingInterval is the reporting_interval of the Envoys' filters
	// [1s], at most an hour. An assignment lives TTLIntervals of them [2],
	// rounded up to whole seconds (Envoy reads only the seconds), and its
	// lease is paid that long ahead plus DeliverySlack [250ms], the
	// longest a response may take to reach Envoy without any overshoot.
	ReportingInterval time.Duration
	TTLIntervals      int
	DeliverySlack     time.Duration
	// AbandonAfter is how long a bucket may go without a request (allowed
	// or denied) before it is abandoned and forgotten [30s].
	AbandonAfter time.Duration
	// Concurrency is how many of a message's buckets are decided at once
	// [1]: with a store of round trips (Redis), whose batching merges
	// concurrent decisions into one call, a message of many buckets then
	// costs a few calls instead of one per bucket.
	Concurrency int
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
	dlog  *decisionLog // nil: no decision log
	ttl   int64        // ns, whole seconds
	ahead int64        // ttl + slack: how far ahead a lease is paid

	mu       sync.Mutex
	pol      *policy.Policy
	ord      *orders
	stopping chan struct{} // closed when Run ends
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
	pushes []pending       // actions for other streams it caused (sendMu, pushMu)
	pushMu sync.Mutex      // pushes, while a message's buckets are decided at once
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
	key      string         // the rule's key (Rule.AppendKey), its first band's unless a budget
	hash     string         // key's keyed hash, for the decision log ("" with it off)
	entries  []policy.Entry // in the rule's order: each band's key (Rule.AppendBandKey)
	rule     *policy.Rule
	revision int64
	fill     fill // of all its bands (fillOfRule)

	mu      sync.Mutex
	subs    []*sub
	weights []int64 // scratch of shares
	shares  []int64 // scratch of shares, one per subs
	pushes  []pending
	req     store.Request
	keys    []byte // the bands' keys of req
	results [policy.MaxBands]store.Result
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
	if opts.KeyHash == nil {
		opts.KeyHash = keyhash.Random()
	}
	orDefault(&opts.ReportingInterval, DefaultReportingInterval)
	if opts.ReportingInterval > time.Hour {
		return nil, fmt.Errorf("rlqs: reporting interval %v: at most 1h", opts.ReportingInterval)
	}
	orDefault(&opts.DeliverySlack, DefaultDeliverySlack)
	orDefault(&opts.AbandonAfter, DefaultAbandonAfter)
	orDefault(&opts.TTLIntervals, DefaultTTLIntervals)
	orDefault(&opts.Concurrency, 1)
	orDefault(&opts.MaxStreams, DefaultMaxStreams)
	orDefault(&opts.MaxBucketsPerStream, DefaultMaxBucketsPerStream)
	ttl := (time.Duration(opts.TTLIntervals)*opts.ReportingInterval + time.Second - 1).Truncate(time.Second)
	return &Service{
		opts: opts, m: newMetrics(opts.Registerer), dlog: newDecisionLog(opts.DecisionLog, opts.KeyHash),
		ttl: int64(ttl), ahead: int64(ttl + opts.DeliverySlack),
		stopping: make(chan struct{}),
		streams:  make(map[*stream]struct{}), buckets: make(map[string]*shared), counters: make(map[[2]string]*ruleCounters),
	}, nil
}

// orDefault sets *v to d when it is not positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// StreamRateLimitQuotas serves one Envoy's stream: every usage report is
// answered, in one response, with an action for each of its buckets. It
// ends with Unavailable once Run's context ends (shutdown), so that a
// drain does not wait for streams that never end: Envoy keeps its
// assignments until their TTL and opens its stream again, to another
// replica.
func (s *Service) StreamRateLimitQuotas(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st, err := s.open(gs.Context(), gs.Send)
	if err != nil {
		return err
	}
	defer s.close(st)
	msgs, errs := make(chan *rlqsv3.RateLimitQuotaUsageReports), make(chan error, 1)
	go func() {
		for {
			msg, err := gs.Recv()
			if err != nil {
				errs <- err
				return
			}
			select {
			case msgs <- msg:
			case <-gs.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case <-s.stopping:
			return status.Error(codes.Unavailable, "rlqs: tokengate is shutting down; report again on a new stream")
		case err := <-errs:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case msg := <-msgs:
			if err := s.answer(st, msg); err != nil {
				return err
			}
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
	st.resp.BucketAction = slices.Grow(st.resp.BucketAction[:0], len(usages))[:len(usages)]
	s.reportAll(st, usages, now)
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
