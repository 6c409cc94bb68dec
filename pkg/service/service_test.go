package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const testPolicy = `
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 5
      refill: 1/s
    - name: upload
      match: [{key: user_id}, {key: path, value: /upload/*}]
      capacity: 20
      refill: 2/s
      cost: 4
      max_cost: 10
    - name: shadow-ip
      match: [{key: remote_address}]
      capacity: 1
      refill: 1/m
      shadow: true
    - name: health
      match: [{key: path, value: /healthz}]
      unlimited: true
    - name: fail-open
      match: [{key: tenant}]
      capacity: 3
      refill: 1/s
      on_store_error: allow
`

type fixture struct {
	svc   *Service
	clk   *clock.Fake
	m     *metrics.Metrics
	store store.Store
}

func newFixture(t testing.TB, st store.Store) *fixture {
	t.Helper()
	return newFixtureWith(t, testPolicy, func(clk *clock.Fake) store.Store {
		if st == nil {
			st = memory.New(memory.Options{Clock: clk})
		}
		return st
	}, nil)
}

// newFixtureWith is a fixture of the policy src on the store st makes
// from the fixture's clock, with the options changed by tweak (nil: as
// they are) before New.
func newFixtureWith(t testing.TB, src string, st func(*clock.Fake) store.Store, tweak func(*Options)) *fixture {
	t.Helper()
	pol, err := policy.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	s := st(clk)
	m := metrics.New(prometheus.NewRegistry())
	o := Options{Policy: func() *policy.Policy { return pol }, Store: s, StoreName: "memory", Metrics: m, Clock: clk}
	if tweak != nil {
		tweak(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc, clk, m, s}
}

// descr builds a descriptor from key=value pairs.
func descr(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) call(t testing.TB, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, key string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// reasonOf is the reason in a response's dynamic metadata (of the
// descriptor that decided), "" when none.
func reasonOf(resp *rlsv3.RateLimitResponse) string {
	return resp.GetDynamicMetadata().GetFields()[MetaReason].GetStringValue()
}

// degradedOf reports whether a response's dynamic metadata marks a
// descriptor degraded.
func degradedOf(resp *rlsv3.RateLimitResponse) bool {
	f := resp.GetDynamicMetadata().GetFields()
	if f[MetaDegraded].GetBoolValue() {
		return true
	}
	for _, d := range f[MetaDescriptors].GetListValue().GetValues() {
		if d.GetStructValue().GetFields()[MetaDegraded].GetBoolValue() {
			return true
		}
	}
	return false
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestBurstThenRefill(t *testing.T) {
	f := newFixture(t, nil)
	for i := range 5 {
		resp := f.call(t, 0, descr("user_id", "alice"))
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.LimitRemaining != uint32(4-i) || st.CurrentLimit.GetName() != "per-user" ||
			st.CurrentLimit.RequestsPerUnit != 1 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("request %d: %v", i, resp)
		}
		if got := st.DurationUntilReset.AsDuration(); got != time.Duration(i+1)*time.Second {
			t.Fatalf("request %d: reset in %v, want %ds", i, got, i+1)
		}
	}
	f.clk.Add(300 * time.Millisecond)
	resp := f.call(t, 0, descr("user_id", "alice"))
	if resp.OverallCode != over || header(resp, HeaderRetryAfter) != "1" || resp.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("sixth request: %v", resp)
	}
	f.clk.Add(700 * time.Millisecond)
	if resp := f.call(t, 0, descr("user_id", "alice")); resp.OverallCode != ok {
		t.Fatalf("after 1s: %v", resp)
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "per-user", "over_limit")); got != 1 {
		t.Fatalf("over_limit counted %v times, want 1", got)
	}
}

func TestCost(t *testing.T) {
	f := newFixture(t, nil)
	up := descr("user_id", "bob", "path", "/upload/a")
	if r := f.call(t, 0, up); r.Statuses[0].LimitRemaining != 16 {
		t.Fatalf("rule cost 4: %v", r)
	}
	if r := f.call(t, 3, up); r.Statuses[0].LimitRemaining != 13 {
		t.Fatalf("request hits_addend 3: %v", r)
	}
	up.HitsAddend = wrapperspb.UInt64(0)
	if r := f.call(t, 3, up); r.Statuses[0].LimitRemaining != 13 || r.OverallCode != ok {
		t.Fatalf("descriptor hits_addend 0 checks only: %v", r)
	}
	up.HitsAddend, up.IsNegativeHits = wrapperspb.UInt64(5), true
	if r := f.call(t, 0, up); r.Statuses[0].LimitRemaining != 18 {
		t.Fatalf("refund 5: %v", r)
	}
	up.HitsAddend, up.IsNegativeHits = wrapperspb.UInt64(11), false
	r := f.call(t, 0, up, descr("user_id", "bob"))
	if r.OverallCode != over || r.Statuses[0].Code != over || !strings.Contains(reasonOf(r), "max_cost 10") ||
		header(r, HeaderRetryAfter) != "" || r.Statuses[1].LimitRemaining != 5 {
		t.Fatalf("cost above max_cost: %v", r)
	}
	if r := f.call(t, 0, descr("user_id", "bob")); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("the refused request charged its neighbour: %v", r)
	}
}

func TestAllOrNothing(t *testing.T) {
	f := newFixture(t, nil)
	for range 5 {
		f.call(t, 0, descr("user_id", "carol"))
	}
	r := f.call(t, 0, descr("user_id", "dave"), descr("user_id", "carol"))
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
		t.Fatalf("one over: %v", r)
	}
	if r := f.call(t, 0, descr("user_id", "dave")); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("dave was charged by a refused request: %v", r)
	}
}

func TestNoRuleUnlimitedShadow(t *testing.T) {
	f := newFixture(t, nil)
	r, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "x")}})
	if err != nil || r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v %v", r, err)
	}
	for range 3 {
		if r := f.call(t, 0, descr("path", "/healthz"), descr("nobody", "x")); r.OverallCode != ok {
			t.Fatalf("unlimited and unmatched: %v", r)
		}
	}
	// The shadow rule (capacity 1) would refuse the second call: it answers
	// OK, counts it, and does not stop the enforced descriptor.
	f.call(t, 0, descr("remote_address", "10.0.0.1"), descr("user_id", "erin"))
	r = f.call(t, 0, descr("remote_address", "10.0.0.1"), descr("user_id", "erin"))
	if r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[1].LimitRemaining != 3 {
		t.Fatalf("shadow: %v", r)
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "shadow-ip", "shadow_over_limit")); got != 1 {
		t.Fatalf("shadow_over_limit counted %v, want 1", got)
	}
}

func TestRequestIDReplay(t *testing.T) {
	f := newFixture(t, nil)
	id := descr("request_id", "abc-123")
	first := f.call(t, 0, descr("user_id", "frank"), id)
	again := f.call(t, 0, descr("user_id", "frank"), id)
	if first.Statuses[0].LimitRemaining != 4 || again.Statuses[0].LimitRemaining != 4 || again.Statuses[1].Code != ok {
		t.Fatalf("replay: %v then %v", first, again)
	}
	if r := f.call(t, 0, descr("user_id", "frank")); r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("the replay was charged: %v", r)
	}
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t, nil)
	many := make([]*ratelimitv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = descr("user_id", "x")
	}
	long := strings.Repeat("k", MaxKeyBytes+1)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"empty domain":   {Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "x")}},
		"no descriptors": {Domain: "edge"},
		"too many":       {Domain: "edge", Descriptors: many},
		"empty entries":  {Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
		"empty key":      {Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("", "x")}},
		"key too long":   {Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr(long, "x")}},
		"nil descriptor": {Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil}},
		"nil entry":      {Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{nil}}}},
	} {
		_, err := f.svc.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, err)
		}
	}
	r := f.call(t, 0, descr("user_id", strings.Repeat("v", MaxValueBytes+1)))
	if r.OverallCode != over || !strings.Contains(reasonOf(r), "descriptor value") {
		t.Fatalf("over-long value: %v", r)
	}
}

// failing is a store that always fails, like an unreachable Redis.
type failing struct{}

func (failing) Decide(context.Context, *store.Request, []store.Result) (store.Outcome, error) {
	return store.Outcome{}, errors.New("connection refused")
}

func TestStoreErrorFollowsRule(t *testing.T) {
	f := newFixture(t, failing{})
	if r := f.call(t, 0, descr("user_id", "x")); r.OverallCode != over || !degradedOf(r) {
		t.Fatalf("on_store_error deny: %v", r)
	}
	if r := f.call(t, 0, descr("tenant", "x")); r.OverallCode != ok || !degradedOf(r) {
		t.Fatalf("on_store_error allow: %v", r)
	}
	if got := testutil.ToFloat64(f.m.StoreErrors.WithLabelValues("memory")); got != 2 {
		t.Fatalf("store errors counted %v, want 2", got)
	}
}
