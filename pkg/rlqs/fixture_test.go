package rlqs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// tester is what the fixture needs of a test: testing.TB's and rapid.T's.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type fixture struct {
	t     tester
	clk   *clock.Fake
	store store.Store
	comp  policy.Compiler
	pol   atomic.Pointer[policy.Policy]
	reg   *prometheus.Registry
	opts  Options
	svc   *Service
}

func newFixture(t tester, yaml string, opts Options) *fixture {
	t.Helper()
	return newFixtureAt(t, yaml, opts, time.Time{})
}

// newFixtureAt is newFixture whose clock reads wall now (the policy's
// Anchor, for calendar budgets); the zero wall leaves the zero Anchor.
func newFixtureAt(t tester, yaml string, opts Options, wall time.Time) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: new(clock.Fake), reg: prometheus.NewRegistry()}
	f.clk.Set(int64(time.Hour)) // not 0: a zero instant hides mistakes
	if !wall.IsZero() {
		f.comp.Anchor = clock.AnchorAt(wall, f.clk.Now())
	}
	f.store = memory.New(memory.Options{Clock: f.clk})
	f.load(yaml)
	f.opts = opts
	f.svc = f.replica(f.reg, f.store)
	return f
}

// replica is another service (a replica of tokengate) on st, the
// fixture's policy and clock, its metrics on reg.
func (f *fixture) replica(reg *prometheus.Registry, st store.Store) *Service {
	f.t.Helper()
	opts := f.opts
	opts.Policy, opts.Store, opts.Clock, opts.Registerer = f.pol.Load, st, f.clk, reg
	svc, err := New(opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

// load compiles and serves a policy, as watch.Publisher does.
func (f *fixture) load(yaml string) *policy.Policy {
	f.t.Helper()
	p, err := f.comp.Compile("policy.yaml", []byte(yaml), f.pol.Load(), f.clk.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	p.Activate()
	f.pol.Store(p)
	return p
}

// conn is a stream opened on the service without gRPC: what it is sent
// is kept (cloned: the service reuses its responses).
type conn struct {
	f    *fixture
	svc  *Service
	st   *stream
	mu   sync.Mutex
	got  []*rlqsv3.RateLimitQuotaResponse
	fail error
}

func (f *fixture) open() *conn { return f.openOn(f.svc) }

// openOn opens a stream on svc, one of the fixture's replicas.
func (f *fixture) openOn(svc *Service) *conn {
	f.t.Helper()
	c := &conn{f: f, svc: svc}
	st, err := svc.open(context.Background(), func(r *rlqsv3.RateLimitQuotaResponse) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.got = append(c.got, proto.Clone(r).(*rlqsv3.RateLimitQuotaResponse))
		return c.fail
	})
	if err != nil {
		f.t.Fatal(err)
	}
	c.st = st
	return c
}

// take returns and forgets what the stream was sent.
func (c *conn) take() []*rlqsv3.RateLimitQuotaResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

// send answers one report and returns what the stream was sent since.
func (c *conn) send(msg *rlqsv3.RateLimitQuotaUsageReports) ([]*rlqsv3.RateLimitQuotaResponse, error) {
	err := c.svc.answer(c.st, msg)
	return c.take(), err
}

// envoy is an emulated Envoy on this stream.
func (c *conn) envoy(domain string, interval time.Duration, phase int64) *envoy {
	return newEnvoy(domain, interval, phase, func(msg *rlqsv3.RateLimitQuotaUsageReports) []*rlqsv3.RateLimitQuotaResponse {
		got, err := c.send(msg)
		if err != nil {
			c.f.t.Fatalf("report refused: %v", err)
		}
		return got
	})
}

// report is a message of one usage.
func report(domain string, id map[string]string, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: allowed, NumRequestsDenied: denied},
	}}
}

// balance is what rule's bucket for entries (in its order) holds now,
// read by a decision of cost 0.
func (f *fixture) balance(domain, rule string, entries ...policy.Entry) int64 {
	f.t.Helper()
	r := f.pol.Load().Rule(domain, rule)
	req := &store.Request{Now: f.clk.Now(), Items: []store.Item{{Key: string(r.AppendKey(nil, entries)), Version: r.Version}}}
	res := make([]store.Result, 1)
	if _, err := f.store.Decide(context.Background(), req, res); err != nil {
		f.t.Fatal(err)
	}
	return res[0].Remaining - res[0].Debt
}

// only is the one action of the responses.
func only(t tester, rs []*rlqsv3.RateLimitQuotaResponse) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	t.Helper()
	if len(rs) != 1 || len(rs[0].GetBucketAction()) != 1 {
		t.Fatalf("want one response of one action, got %v", rs)
	}
	return rs[0].GetBucketAction()[0]
}
