package service

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const postPaidPolicy = `
request_id_key: request_id
domains:
  edge:
    - name: tokens
      match: [{key: user_id}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
      max_debt: 100000
    - name: team
      match: [{key: team}]
      capacity: 10
      refill: 1/s
      charge: after_response
      max_debt: 5
    - name: per-ip
      match: [{key: ip}]
      capacity: 2
      refill: 1/h
    - name: quota-ip
      match: [{key: ip}, {key: plan}]
      capacity: 1
      refill: 1/h
      quota: true
`

func newPostPaidFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, postPaidPolicy, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
}

// hits is d with its own hits_addend n (Envoy's per-descriptor
// hits_addend, as Envoy Gateway's cost.request and cost.response set it).
func hits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestPostPaidClassification: on a post-paid rule a descriptor with its
// own hits_addend above 0 is a report, charged whatever it is; any other,
// whatever the request's hits_addend, is a check that charges nothing.
func TestPostPaidClassification(t *testing.T) {
	for _, tc := range []struct {
		name      string
		requestHA uint32
		desc      *ratelimitv3.RateLimitDescriptor
		code      rlsv3.RateLimitResponse_Code
		remaining uint32 // in the answer
		after     uint32 // what a check finds next
	}{
		{"no hits_addend: a check", 0, descr("user_id", "a"), ok, 1000, 1000},
		{"its own hits_addend 0: a check", 0, hits(descr("user_id", "a"), 0), ok, 1000, 1000},
		{"the request's hits_addend only: a check", 50, descr("user_id", "a"), ok, 1000, 1000},
		{"its own hits_addend: a report", 0, hits(descr("user_id", "a"), 300), ok, 700, 700},
		{"a report over the balance: charged, OVER_LIMIT", 0, hits(descr("user_id", "a"), 5000), over, 0, 0},
		{"a report to exactly zero: OK", 7, hits(descr("user_id", "a"), 1000), ok, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPostPaidFixture(t)
			r := f.call(t, tc.requestHA, tc.desc)
			if r.OverallCode != tc.code || r.Statuses[0].Code != tc.code || r.Statuses[0].LimitRemaining != tc.remaining {
				t.Fatalf("got %v", r)
			}
			if got := f.call(t, 0, descr("user_id", "a")).Statuses[0].LimitRemaining; got != tc.after {
				t.Fatalf("a check then finds %d, want %d", got, tc.after)
			}
		})
	}
}

// TestPostPaidIssueTable is the issue's table at the service: check, a
// report of 5000 on 1000, and a check refused until 4001 tokens are repaid
// at 1000/h (4h0m3.6s, so retry-after 14404).
func TestPostPaidIssueTable(t *testing.T) {
	f := newPostPaidFixture(t)
	if r := f.call(t, 0, hits(descr("user_id", "u"), 0)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("check: %v", r)
	}
	r := f.call(t, 0, hits(descr("user_id", "u"), 5000))
	md := r.DynamicMetadata.GetFields()
	if r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 || md[MetaDebt].GetNumberValue() != 4000 || md[MetaCost].GetNumberValue() != 5000 {
		t.Fatalf("report: %v", r)
	}
	r = f.call(t, 0, hits(descr("user_id", "u"), 0))
	if r.OverallCode != over || header(r, HeaderRetryAfter) != "14404" || r.DynamicMetadata.GetFields()[MetaDebt].GetNumberValue() != 4000 ||
		r.Statuses[0].DurationUntilReset.AsDuration() != 14404*time.Second {
		t.Fatalf("check in debt: %v", r)
	}
	f.clk.Add(4*time.Hour + 3600*time.Millisecond)
	if r := f.call(t, 0, descr("user_id", "u")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("check once repaid: %v", r)
	}
}

// TestPostPaidAllOrNothing: a request's reports are charged whatever its
// other descriptors say; its gates (pre-paid costs, checks) are all or
// nothing, as ever.
func TestPostPaidAllOrNothing(t *testing.T) {
	f := newPostPaidFixture(t)
	f.call(t, 0, descr("ip", "1"), descr("ip", "1")) // per-ip spent
	r := f.call(t, 0, descr("ip", "1"), hits(descr("user_id", "a"), 300))
	if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[1].Code != ok || r.Statuses[1].LimitRemaining != 700 {
		t.Fatalf("a refused pre-paid descriptor and a report: %v", r)
	}
	if got := f.call(t, 0, descr("user_id", "a")).Statuses[0].LimitRemaining; got != 700 {
		t.Fatalf("the report was not charged: %d left", got)
	}
	// In debt, a check refuses the request: its pre-paid descriptor is
	// not charged.
	f.call(t, 0, hits(descr("user_id", "b"), 2000))
	r = f.call(t, 0, descr("user_id", "b"), descr("ip", "2"))
	if r.OverallCode != over || r.Statuses[1].Code != ok || r.Statuses[1].LimitRemaining != 2 {
		t.Fatalf("a check in debt and a pre-paid descriptor: %v", r)
	}
	// A value too long refuses before the store: the report is charged.
	long := make([]byte, MaxValueBytes+1)
	r = f.call(t, 0, descr("ip", string(long)), hits(descr("user_id", "c"), 10))
	if r.OverallCode != over || reasonOf(r) == "" || f.call(t, 0, descr("user_id", "c")).Statuses[0].LimitRemaining != 990 {
		t.Fatalf("a refused descriptor and a report: %v", r)
	}
	// A report of a pre-paid rule is an ordinary cost: over max_cost.
	if r := f.call(t, 0, hits(descr("ip", "3"), 5)); r.OverallCode != over || reasonOf(r) == "" {
		t.Fatalf("hits_addend 5 on a pre-paid rule of capacity 2: %v", r)
	}
}

// TestPostPaidWithQuota: when quota descriptors make the service decide
// again (quota.go), a report is charged once and keeps its answer.
func TestPostPaidWithQuota(t *testing.T) {
	f := newPostPaidFixture(t)
	f.call(t, 0, descr("ip", "1", "plan", "free")) // one quota spent
	r := f.call(t, 0, descr("ip", "1", "plan", "free"), descr("ip", "2", "plan", "free"), hits(descr("team", "t"), 30))
	if r.OverallCode != over || r.Statuses[1].Code != ok || r.Statuses[2].Code != over || r.Statuses[2].LimitRemaining != 0 {
		t.Fatalf("a quota request with a report: %v", r)
	}
	if got := testutil.ToFloat64(f.m.Forgiven.WithLabelValues("edge", "team")); got != 15 {
		t.Fatalf("forgiven %v, want 15 (30 reported on 10 with max_debt 5)", got)
	}
	if got := f.call(t, 0, descr("team", "t")).DynamicMetadata.GetFields()[MetaDebt].GetNumberValue(); got != 5 {
		t.Fatalf("debt %v after the quota request, want 5", got)
	}
}

// TestPostPaidRequestID: Envoy sends the check and the report with one
// x-request-id; the report is decided (charged), never answered from the
// check; a repeated report is replayed, its forgiven tokens counted once.
func TestPostPaidRequestID(t *testing.T) {
	f := newPostPaidFixture(t)
	f.call(t, 0, descr("team", "t"), descr("request_id", "req-1"))
	if r := f.call(t, 0, hits(descr("team", "t"), 30), descr("request_id", "req-1")); r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the report with its check's id: %v", r)
	}
	for range 2 {
		f.call(t, 0, hits(descr("team", "t"), 30), descr("request_id", "req-2"))
	}
	// 15 of the first report, 30 of the second (at the bound), none of
	// its replay.
	if got := testutil.ToFloat64(f.m.Forgiven.WithLabelValues("edge", "team")); got != 45 {
		t.Fatalf("forgiven %v, want 45", got)
	}
}

// TestPostPaidDecideFunc: a front door's decision of a report carries its
// debt and forgiven tokens in the verdict.
func TestPostPaidDecideFunc(t *testing.T) {
	f := newPostPaidFixture(t)
	d, err := f.svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{hits(descr("team", "t"), 30)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Verdicts[0]; v.Result != ResultOverLimit || v.Cost != 30 || v.Debt != 5 || v.Forgiven != 15 || v.Remaining != 0 {
		t.Fatalf("verdict %+v", v)
	}
}
