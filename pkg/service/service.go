package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// Limits on the shape of a request (see the package comment).
const (
	MaxDescriptors = store.MaxItems
	MaxEntries     = policy.MaxMatchEntries
	MaxKeyBytes    = 256
	MaxValueBytes  = 4096
)

// Options configure a Service. Policy, Store and Metrics are required.
type Options struct {
	// Policy returns the policy now serving; it is called once per request.
	Policy func() *policy.Policy
	Store  store.Store
	// StoreName labels tokengate_store_errors_total ("memory", "redis").
	StoreName string
	// Local is the bounded local budget that rules with on_store_error:
	// local decide from while Store fails (see pkg/store/local); without
	// it such rules deny.
	Local   store.Store
	Metrics *metrics.Metrics
	Clock   clock.Clock  // [monotonic clock]
	Logger  *slog.Logger // [slog.Default()]
	// StoreLogEvery is the least time between two log lines about store
	// failures [10s]; each line says how many failures it stands for.
	StoreLogEvery time.Duration
	// ClientReasonHeader tells clients why, in the answer's headers:
	// HeaderReason on a refusal that can never pass (its text names rules
	// and costs), HeaderDegraded on an answer on_store_error made (the
	// store is failing). Off, the dynamic metadata and the decision log
	// alone say so, and clients learn nothing internal.
	ClientReasonHeader bool
	// ShadowAll never answers OVER_LIMIT overall (compatmodes.go).
	ShadowAll bool
	// LimitHeaders, when set, adds its three headers to every answer
	// with a limit (compatmodes.go).
	LimitHeaders *LimitHeaders
	// DecisionLog logs refusals and degraded answers at info, every
	// decision at debug, bounded per second (decisionlog.go); off without
	// its Logger.
	DecisionLog DecisionLog
	// Tracer, when set, traces each decision as one span (trace.go).
	Tracer trace.Tracer
	// Candidate, when set, decides every request again under a candidate
	// policy, never changing the answer (candidate.go).
	Candidate *Candidate
	// KeyHash names a bucket in the metadata and the decision log
	// (metadata.go); replicas given the same key name it alike
	// [keyhash.Random(): names of this Service alone].
	KeyHash *keyhash.Key
}

// Service implements rlsv3.RateLimitServiceServer.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts      Options
	rules     atomic.Pointer[ruleTable]
	reqStates sync.Pool // *reqState
	cand      candidateState
	storeLog  *logbudget.Budget
	decisions *decisionLog // nil: off
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Policy == nil || opts.Store == nil || opts.Metrics == nil {
		return nil, errors.New("service: Policy, Store and Metrics are required")
	}
	if c := opts.Candidate; c != nil && (c.Policy == nil || c.Store == nil || c.Tracker == nil) {
		return nil, errors.New("service: a Candidate's Policy, Store and Tracker are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.StoreLogEvery <= 0 {
		opts.StoreLogEvery = 10 * time.Second
	}
	if opts.KeyHash == nil {
		opts.KeyHash = keyhash.Random()
	}
	s := &Service{opts: opts, storeLog: logbudget.New(1, opts.StoreLogEvery), decisions: newDecisionLog(opts.DecisionLog)}
	s.reqStates.New = func() any { return &reqState{keyHasher: opts.KeyHash.Hasher()} }
	return s, nil
}

// ShouldRateLimit implements the ratelimit.v3 RPC.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := s.opts.Clock.Now()
	if err := checkShape(req.GetDomain(), req.GetDescriptors()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return s.decide(ctx, now, req.Domain, req.Descriptors, req.HitsAddend, nil), nil
}

// Decision is the answer to a request.
type Decision struct {
	// Response is what ShouldRateLimit would answer: the overall code, one
	// status per descriptor, in order, and the headers to add.
	Response *rlsv3.RateLimitResponse
	// Verdicts are the descriptors' decisions, in order: Response was
	// written from them.
	Verdicts []Verdict
	// Rules are the rules the descriptors matched, in order (nil: no rule,
	// or the request-id descriptor): Verdicts[i].Rule.
	Rules []*policy.Rule
	// Reason is why the request can never pass as it is, the text of
	// HeaderReason whether or not Response carries it; "" when none.
	Reason string
}

// Decide decides descriptors of domain exactly as ShouldRateLimit decides a
// request with them (hitsAddend is the request's hits_addend), for the
// front doors that build descriptors themselves. A request of a shape
// ShouldRateLimit refuses is refused with the same InvalidArgument error.
func (s *Service) Decide(ctx context.Context, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hitsAddend uint32) (*Decision, error) {
	var d *Decision
	err := s.DecideFunc(ctx, domain, descriptors, hitsAddend, func(dec *Decision) { d = dec.clone() })
	return d, err
}

// DecideFunc is Decide for a caller that only reads the decision: f gets
// it before DecideFunc returns, and it is valid only until f returns (its
// verdicts and rules are the service's working memory, which the next
// request reuses), so that nothing is copied. Response stays valid.
func (s *Service) DecideFunc(ctx context.Context, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hitsAddend uint32, f func(*Decision)) error {
	now := s.opts.Clock.Now()
	if err := checkShape(domain, descriptors); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	s.decide(ctx, now, domain, descriptors, hitsAddend, f)
	return nil
}

// ClientReasonHeader reports whether answers tell clients why
// (Options.ClientReasonHeader): the front doors' own headers and bodies
// follow it.
func (s *Service) ClientReasonHeader() bool { return s.opts.ClientReasonHeader }

// clone copies d out of the working memory, in one allocation for up to
// two descriptors.
func (d *Decision) clone() *Decision {
	c := new(struct {
		Decision
		verdicts [2]Verdict
		rules    [2]*policy.Rule
	})
	c.Response, c.Reason = d.Response, d.Reason
	if n := len(d.Verdicts); n <= len(c.verdicts) {
		c.Verdicts, c.Rules = c.verdicts[:n], c.rules[:n]
	} else {
		c.Verdicts, c.Rules = make([]Verdict, n), make([]*policy.Rule, n)
	}
	copy(c.Verdicts, d.Verdicts)
	copy(c.Rules, d.Rules)
	return &c.Decision
}

// decide is the one decision path: match, plan, store, judge, respond.
// When f is not nil it reads the decision before the working memory is
// released.
func (s *Service) decide(ctx context.Context, now int64, domain string, descriptors []*ratelimitv3.RateLimitDescriptor, hits uint32, f func(*Decision)) *rlsv3.RateLimitResponse {
	pol := s.opts.Policy()
	table := s.ruleTable(pol)
	rs := s.reqStates.Get().(*reqState)
	defer s.reqStates.Put(rs)

	ctx, span := s.startSpan(ctx)
	rs.plan(pol, domain, descriptors, hits, now)
	span.storeBegin()
	rs.decide(ctx, s.opts.Store, s.opts.Local, now)
	span.storeEnd()
	switch {
	case rs.enforced.err != nil || rs.shadow.err != nil:
		s.opts.Metrics.StoreErrors.WithLabelValues(s.opts.StoreName).Inc()
		s.logStoreFailure(ctx, now, rs)
	case len(rs.enforced.req.Items) > 0 || len(rs.shadow.req.Items) > 0:
		s.logStoreBack(ctx, now)
	}
	verdicts := rs.judge(table)
	resp := rs.respond(domain, verdicts, s.opts.ClientReasonHeader)
	if s.opts.LimitHeaders != nil {
		addLimitHeaders(resp, s.opts.LimitHeaders)
	}
	if s.opts.ShadowAll {
		shadowAll(resp)
	}
	rs.count(table, domain, descriptors, verdicts, s.opts.Metrics)
	s.describe(ctx, now, domain, rs, verdicts, resp, &span)
	// A store call that timed out may have charged: tell the store whether
	// the request went through on on_store_error's answer (a shadow rule's
	// charge stands, as it does when the store answers).
	resolve(rs.enforced.err, resp.OverallCode == rlsv3.RateLimitResponse_OK)
	resolve(rs.shadow.err, true)
	if s.opts.Candidate != nil {
		s.decideCandidate(ctx, now, pol, domain, descriptors, hits, rs)
	}
	if f != nil {
		f(rs.decision(resp))
		rs.dec = Decision{} // the pool keeps no response alive
	}
	return resp
}

// describe says why the request was answered so, besides the response's
// metadata: the decision log and the span.
func (s *Service) describe(ctx context.Context, now int64, domain string, rs *reqState, vs []Verdict, resp *rlsv3.RateLimitResponse, span *decisionSpan) {
	if s.decisions != nil {
		s.decisions.write(ctx, now, domain, rs, vs)
	}
	span.end(domain, s.opts.StoreName, rs, vs, resp)
}

// resolve tells a store whose call may have charged (store.Ambiguous)
// whether the request went through.
func resolve(err error, passed bool) {
	if err == nil {
		return // before errors.As: its target would escape, an allocation per request
	}
	var amb store.Ambiguous
	if errors.As(err, &amb) {
		amb.Resolve(passed)
	}
}

// logStoreFailure logs the store's failure of this request, unless a line
// went out less than StoreLogEvery ago: during an outage every request
// fails, and one line per interval with the number it stands for says as
// much as a line per request.
func (s *Service) logStoreFailure(ctx context.Context, now int64, rs *reqState) {
	held, ok := s.storeLog.Take(now)
	if !ok {
		return
	}
	attrs := []slog.Attr{
		slog.String("store", s.opts.StoreName),
		slog.String("error", errors.Join(rs.enforced.err, rs.shadow.err).Error()),
		slog.Int64("suppressed", held),
	}
	if err := rs.enforced.local.err; err != nil {
		attrs = append(attrs, slog.String("local_error", err.Error()))
	}
	s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "store failed; rules' on_store_error decides", attrs...)
}

// logStoreBack closes a run of failures with the number not yet logged,
// once the store has answered a request again. With nothing held back it
// costs one atomic load.
func (s *Service) logStoreBack(ctx context.Context, now int64) {
	if held, ok := s.storeLog.Flush(now); ok {
		s.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "store answering again",
			slog.String("store", s.opts.StoreName), slog.Int64("suppressed", held))
	}
}

// checkShape refuses what Envoy's configuration, not a client, got wrong.
func checkShape(domain string, descriptors []*ratelimitv3.RateLimitDescriptor) error {
	switch {
	case domain == "":
		return errors.New("domain is empty")
	case len(descriptors) == 0:
		return errors.New("no descriptors")
	case len(descriptors) > MaxDescriptors:
		return fmt.Errorf("%d descriptors: at most %d", len(descriptors), MaxDescriptors)
	}
	for i, d := range descriptors {
		if n := len(d.GetEntries()); n == 0 || n > MaxEntries {
			return fmt.Errorf("descriptor %d has %d entries: want 1 to %d", i, n, MaxEntries)
		}
		for j, e := range d.Entries {
			if k := len(e.GetKey()); k == 0 || k > MaxKeyBytes {
				return fmt.Errorf("descriptor %d entry %d: key of %d bytes: want 1 to %d", i, j, k, MaxKeyBytes)
			}
		}
	}
	return nil
}
