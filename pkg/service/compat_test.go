package service

// "compat" means envoyproxy/ratelimit's format and answers (the
// "reference" of the comments). The reference's integration tests,
// replayed on the real decision path (memory store, fake clock) with its
// own configuration files: for a fresh burst a token bucket and a fixed
// window give the same codes, current_limit and limit_remaining.

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const compatData = "../policy/testdata/envoyproxy/"

type compatFixture struct {
	t   *testing.T
	svc *Service
	clk *clock.Fake
	reg *prometheus.Registry
}

func newCompatFixture(t *testing.T, pol *policy.Policy) *compatFixture {
	return newCompatFixtureWith(t, pol, Options{})
}

// newCompatFixtureWith is newCompatFixture with the other fields of opts set.
func newCompatFixtureWith(t *testing.T, pol *policy.Policy, opts Options) *compatFixture {
	pol.Activate()
	clk := new(clock.Fake)
	clk.Set(int64(time.Hour))
	reg := prometheus.NewRegistry()
	opts.Policy, opts.Store, opts.StoreName, opts.Metrics, opts.Clock = func() *policy.Policy { return pol }, memory.New(memory.Options{Clock: clk}), "memory", metrics.New(reg), clk
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &compatFixture{t, svc, clk, reg}
}

func readCompat(t testing.TB, path string) *policy.Policy {
	return readCompatCharged(t, path, nil)
}

// readCompatCharged reads the reference's files at path, their rules
// charged as charge says (policy.Compiler.ReferenceCharge: nil, every hit,
// the reference's default).
func readCompatCharged(t testing.TB, path string, charge *policy.Charge) *policy.Policy {
	files, err := policy.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := (&policy.Compiler{ReferenceCharge: charge}).CompileFiles(path, files, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *compatFixture) call(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	f.t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: 1})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// want is a descriptor status as the reference's tests write it
// (newDescriptorStatus): code, requests_per_unit, unit, remaining; rpu < 0
// means no current_limit.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       int
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	name      string
}

func (f *compatFixture) expect(what string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, ws ...want) {
	f.t.Helper()
	if resp.OverallCode != overall || len(resp.Statuses) != len(ws) {
		f.t.Fatalf("%s: %v, want overall %v", what, resp, overall)
	}
	for i, w := range ws {
		st := resp.Statuses[i]
		l := st.CurrentLimit
		bad := st.Code != w.code || st.LimitRemaining != w.remaining
		if w.rpu < 0 {
			bad = bad || l != nil
		} else {
			bad = bad || l == nil || l.RequestsPerUnit != uint32(w.rpu) || l.Unit != w.unit || l.Name != w.name
		}
		if bad {
			f.t.Fatalf("%s: status %d: %v, want %+v", what, i, st, w)
		}
	}
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
)

// testBasicBaseConfig of the reference's integration_test.go, with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false (its default: every hit
// counted) and true (charge: stop_when_over), as the reference runs it,
// and pre-paid (the same numbers as true).
func TestCompatIntegrationBasic(t *testing.T) {
	for _, charge := range []*policy.Charge{nil, new(policy.StopWhenOver), new(policy.BeforeRequest)} {
		name := "every_hit"
		if charge != nil {
			name = charge.String()
		}
		t.Run(name, func(t *testing.T) { testCompatIntegrationBasic(t, charge) })
	}
}

func testCompatIntegrationBasic(t *testing.T, charge *policy.Charge) {
	prepaid := charge != nil // key2 is not charged by a request key3 refuses
	f := newCompatFixture(t, readCompatCharged(t, compatData+"integration", charge))
	f.expect("unknown domain", f.call("foo", descr("hello", "world")), ok, want{code: ok, rpu: -1})
	r := f.call("basic", descr("key1", "foo"))
	f.expect("key1", r, ok, want{ok, 50, second, 49, ""})
	if r.Statuses[0].DurationUntilReset == nil {
		t.Fatal("no duration_until_reset")
	}

	for i := range 25 {
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		f.expect(fmt.Sprintf("key2 #%d", i), f.call("another", descr("key2", "12345")), code, want{code, 20, minute, remaining, ""})
	}

	// Two keys in one request: key3 runs out first. As the reference
	// counts, key2 is charged by a request that key3 refuses; with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT it is not.
	for i := range 15 {
		code, remaining1, remaining2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, remaining2 = over, 0
			if prepaid {
				remaining1 = 10
			}
		}
		f.expect(fmt.Sprintf("key2+key3 #%d", i), f.call("another", descr("key2", "6789"), descr("key3", "6789")), code,
			want{ok, 20, minute, remaining1, ""}, want{code, 10, hour, remaining2, ""})
	}

	// The reference checks that duration_until_reset, the time to its
	// window's end, counts down between two hits 2 s apart. Here it is the
	// time until the bucket (20 a day: a token every 72 minutes) is full
	// again: it grows with each hit and shrinks as time passes.
	r1 := f.call("another", descr("key4", "durTest"))
	f.clk.Add(2 * time.Second)
	r2 := f.call("another", descr("key4", "durTest"))
	if d1, d2 := r1.Statuses[0].DurationUntilReset.AsDuration(), r2.Statuses[0].DurationUntilReset.AsDuration(); d1 != 72*time.Minute || d2 != 144*time.Minute-2*time.Second {
		t.Fatalf("duration_until_reset %v then %v", d1, d2)
	}
}

// The reference's reload.yaml: requests_per_unit 0 is always over the limit.
func TestCompatIntegrationReload(t *testing.T) {
	f := newCompatFixture(t, readCompat(t, compatData+"reload/reload.yaml"))
	f.expect("key1", f.call("reload", descr("key1", "foo")), ok, want{ok, 50, second, 49, ""})
	for i := range 3 {
		f.expect(fmt.Sprintf("block #%d", i), f.call("reload", descr("block", "foo")), over, want{over, 0, second, 0, ""})
	}
	f.expect("one_per_minute", f.call("reload", descr("one_per_minute", "foo")), ok, want{ok, 1, minute, 0, ""})
	f.expect("one_per_minute again", f.call("reload", descr("one_per_minute", "foo")), over, want{over, 1, minute, 0, ""})
}

// testShareThreshold of the reference.
func TestCompatIntegrationShareThreshold(t *testing.T) {
	f := newCompatFixture(t, readCompat(t, compatData+"integration"))
	const domain = "share-threshold-test"
	for i := range 10 {
		f.expect(fmt.Sprintf("files/a.pdf #%d", i), f.call(domain, descr("files", "files/a.pdf")), ok, want{ok, 10, hour, uint32(9 - i), ""})
	}
	f.expect("files/b.csv", f.call(domain, descr("files", "files/b.csv")), over, want{over, 10, hour, 0, ""})
	for i := range 10 {
		f.expect(fmt.Sprintf("no share #%d", i), f.call(domain, descr("files_no_share", fmt.Sprintf("files_no_share/%d", i))), ok, want{ok, 10, hour, 9, ""})
	}
}

// The example configuration's features on the decision path: replaces,
// shadow_mode, requests_per_unit 0, unlimited, nesting.
func TestCompatExample(t *testing.T) {
	f := newCompatFixture(t, readCompat(t, compatData+"examples/example.yaml"))
	noLimit := want{code: ok, rpu: -1}
	unlimited := want{code: ok, rpu: -1, remaining: math.MaxUint32}
	for i := range 3 {
		code := ok
		if i == 2 {
			code = over
		}
		f.expect(fmt.Sprintf("bkthomps replaced #%d", i),
			f.call("rl", descr("foo", "x", "bar", "bkthomps"), descr("source_cluster", "proxy", "destination_cluster", "bkthomps")), code,
			noLimit, want{code, 2, minute, uint32(max(1-i, 0)), ""})
	}
	f.expect("bkthomps alone", f.call("rl", descr("foo", "x", "bar", "bkthomps")), ok, want{ok, 1, minute, 0, "bkthomps"})
	f.expect("banned", f.call("rl", descr("foo", "x", "bar", "banned")), over, want{over, 0, minute, 0, "banned_limit"})
	f.expect("banned replaced", f.call("rl", descr("foo", "x", "bar", "banned"), descr("source_cluster", "proxy", "destination_cluster", "override")), ok,
		noLimit, want{ok, 2, minute, 1, ""})
	f.expect("fake_name replaced by category", f.call("rl", descr("category", "account"), descr("source_cluster", "proxy", "destination_cluster", "fake")), ok,
		want{ok, 4, minute, 3, ""}, noLimit)
	for i := range 5 {
		f.expect(fmt.Sprintf("shadow #%d", i), f.call("rl", descr("foo", "x", "baz", "shady")), ok, want{ok, 3, minute, uint32(max(2-i, 0)), ""})
	}
	f.expect("unlimited", f.call("rl", descr("foo", "x", "bay", "y"), descr("qux", "z")), ok, unlimited, unlimited)
	f.expect("deepest", f.call("rl", descr("foo", "a"), descr("foo", "a", "baz", "c")), ok, want{ok, 2, minute, 1, ""}, want{ok, 1, second, 0, ""})
	f.expect("a bucket per value", f.call("rl", descr("foo", "a", "bar", "b"), descr("foo", "b", "bar", "b")), ok, want{ok, 3, minute, 2, ""}, want{ok, 3, minute, 2, ""})
	f.expect("no such node", f.call("rl", descr("foo", "a", "nothing", "b")), ok, noLimit)
}

// Importing the example and serving the native output answers every
// request sequence exactly as serving the example does.
func TestImportDecidesAlike(t *testing.T) {
	compat := readCompat(t, compatData+"examples/example.yaml")
	out, err := compat.NativeYAML()
	if err != nil {
		t.Fatal(err)
	}
	pool := []*ratelimitv3.RateLimitDescriptor{
		descr("category", "account"), descr("source_cluster", "proxy", "destination_cluster", "bkthomps"),
		descr("source_cluster", "proxy", "destination_cluster", "mock"), descr("source_cluster", "proxy", "destination_cluster", "override"),
		descr("source_cluster", "proxy", "destination_cluster", "fake"), descr("source_cluster", "other", "destination_cluster", "mock"),
		descr("foo", "a"), descr("foo", "a", "bar", "b"), descr("foo", "a", "bar", "bkthomps"), descr("foo", "b", "bar", "banned"),
		descr("foo", "a", "baz", "x"), descr("foo", "a", "baz", "shady"), descr("foo", "a", "baz", "not-so-shady"), descr("foo", "a", "bay", "x"),
		descr("unspec", "v"), descr("qux", "v"), descr("service", "service_1"), descr("service", "service_2"), descr("nothing", "x"),
	}
	rapid.Check(t, func(rt *rapid.T) {
		native, err := policy.Parse("native.yaml", out)
		if err != nil {
			rt.Fatal(err)
		}
		// One secret, as two replicas share: the buckets are named alike too.
		names := Options{KeyHash: keyhash.Random()}
		a, z := newCompatFixtureWith(t, readCompat(t, compatData+"examples/example.yaml"), names), newCompatFixtureWith(t, native, names)
		for i := range rapid.IntRange(1, 40).Draw(rt, "requests") {
			ds := rapid.SliceOfN(rapid.SampledFrom(pool), 1, 4).Draw(rt, "descriptors")
			step := time.Duration(rapid.Int64Range(0, int64(30*time.Second)).Draw(rt, "step"))
			a.clk.Add(step)
			z.clk.Add(step)
			ra, rz := a.call("rl", ds...), z.call("rl", ds...)
			if !proto.Equal(ra, rz) {
				rt.Fatalf("request %d %v:\n%v\nimported:\n%v", i, ds, ra, rz)
			}
		}
	})
}

// descriptorSeries reads tokengate_descriptor_decisions_total as
// "rule descriptor result" -> count.
func (f *compatFixture) descriptorSeries() map[string]float64 {
	f.t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range families {
		if fam.GetName() != "tokengate_descriptor_decisions_total" {
			continue
		}
		for _, m := range fam.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["rule"]+" "+l["descriptor"]+" "+l["result"]] = m.Counter.GetValue()
		}
	}
	return out
}

// detailed_metric and value_to_metric count by descriptor only the rules
// that ask, at most metrics.MaxDescriptorSeries values a rule.
func TestCompatDescriptorMetrics(t *testing.T) {
	f := newCompatFixture(t, readCompat(t, compatData+"examples/example.yaml"))
	f.call("rl", descr("foo", "a"))
	for i := range metrics.MaxDescriptorSeries + 5 {
		f.call("rl", descr("unspec", fmt.Sprint(i)))
	}
	f.call("rl", descr("unspec", "0"))
	got := f.descriptorSeries()
	if len(got) != metrics.MaxDescriptorSeries+1 || got["unspec unspec_0 ok"] != 2 {
		t.Fatalf("%d series: %v", len(got), got)
	}
	if got["unspec "+metrics.DescriptorOther+" ok"] != 5 {
		t.Fatalf("_other_: %v", got["unspec "+metrics.DescriptorOther+" ok"])
	}

	g := newCompatFixture(t, readCompat(t, compatData+"unit/share_threshold.yaml"))
	g.call("test-domain", descr("route", "api/v1", "method", "GET"))
	g.call("test-domain", descr("service", "svc/a", "endpoint", "/x"))
	want := map[string]float64{
		"route_api/*.method route_api/*.method ok":            1, // value_to_metric under share_threshold: the pattern
		"service_svc/*.endpoint service_svc/*.endpoint_/x ok": 1, // detailed_metric
	}
	if got := g.descriptorSeries(); len(got) != 2 || got["route_api/*.method route_api/*.method ok"] != 1 || got["service_svc/*.endpoint service_svc/*.endpoint_/x ok"] != 1 {
		t.Fatalf("series %v, want %v", got, want)
	}
}

// The native fields on their own: replaces names rules (a rule's limit
// name is its name unless current_limit says otherwise), not_limited
// stops the search, capacity 0 denies, shared buckets a glob's values
// together, and current_limit is what statuses say.
func TestNativeCompatFields(t *testing.T) {
	pol, err := policy.Parse("native.yaml", []byte(`domains:
  edge:
    - {name: per-user, match: [{key: user}], capacity: 5, refill: 5/m}
    - {name: vip, match: [{key: tier, value: vip}], capacity: 9, refill: 9/m, replaces: [per-user]}
    - {name: stop, match: [{key: path, value: /free/*}], not_limited: true}
    - {name: banned, match: [{key: path, value: /admin*}], capacity: 0, current_limit: {requests_per_unit: 0, unit: hour, name: ban}}
    - name: files
      match: [{key: path, value: "/f*/*.pdf", shared: true}]
      capacity: 2
      refill: 2/h
      current_limit: {requests_per_unit: 2, unit: hour, name: pdf}
    - {name: any-path, match: [{key: path}], capacity: 1, refill: 1/s}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newCompatFixture(t, pol)
	f.expect("replaced", f.call("edge", descr("user", "a"), descr("tier", "vip")), ok, want{code: ok, rpu: -1}, want{ok, 9, minute, 8, "vip"})
	f.expect("not replaced", f.call("edge", descr("user", "a")), ok, want{ok, 5, minute, 4, "per-user"})
	f.expect("stop", f.call("edge", descr("path", "/free/x")), ok, want{code: ok, rpu: -1})
	f.expect("banned", f.call("edge", descr("path", "/admin/x")), over, want{over, 0, hour, 0, "ban"})
	f.expect("pdf 1", f.call("edge", descr("path", "/f1/a.pdf")), ok, want{ok, 2, hour, 1, "pdf"})
	f.expect("pdf 2", f.call("edge", descr("path", "/f2/b.pdf")), ok, want{ok, 2, hour, 0, "pdf"})
	f.expect("pdf 3", f.call("edge", descr("path", "/f3/c.pdf")), over, want{over, 2, hour, 0, "pdf"})
	f.expect("fallback", f.call("edge", descr("path", "/f3/c.txt")), ok, want{ok, 1, second, 0, "any-path"})
}

// quota_mode, every hit charged (the reference's default): a request
// passes while one of its quota descriptors is within its limit; every
// descriptor is charged, the quota descriptors over the limit too, as the
// reference counts them.
func TestCompatQuotaModeEveryHit(t *testing.T) {
	example := compatData + "examples/example.yaml"
	f := newCompatFixture(t, readCompat(t, example))
	s1, s2 := descr("service", "service_1"), descr("service", "service_2") // 1 and 2 a minute
	f.expect("both within", f.call("rl", s1, s2), ok, want{ok, 1, minute, 0, ""}, want{ok, 2, minute, 1, ""})
	f.expect("one over", f.call("rl", s1, s2), ok, want{over, 1, minute, 0, ""}, want{ok, 2, minute, 0, ""})
	f.expect("both over", f.call("rl", s1, s2), over, want{over, 1, minute, 0, ""}, want{over, 2, minute, 0, ""})
	// One token of debt each (max_debt: requests_per_unit) repaid in a
	// minute: service_2 has one token, service_1 none.
	f.clk.Add(time.Minute)
	f.expect("one back", f.call("rl", s2, s1), ok, want{ok, 2, minute, 0, ""}, want{over, 1, minute, 0, ""})

	g := newCompatFixture(t, readCompat(t, example))
	user := descr("foo", "a", "bar", "bkthomps") // 1 a minute, not a quota
	g.expect("all within", g.call("rl", user, s2), ok, want{ok, 1, minute, 0, "bkthomps"}, want{ok, 2, minute, 1, ""})
	g.expect("a limit over", g.call("rl", user, s2), over, want{over, 1, minute, 0, "bkthomps"}, want{ok, 2, minute, 0, ""})
	g.expect("the quota was charged", g.call("rl", s2), over, want{over, 2, minute, 0, ""})

	// A hits_addend above requests_per_unit is counted, as there, and
	// over the limit.
	h := newCompatFixture(t, readCompat(t, example))
	big := &ratelimitv3.RateLimitDescriptor{Entries: s2.Entries, HitsAddend: wrapperspb.UInt64(5)}
	r := h.call("rl", big, s1)
	h.expect("a large hit, other within", r, ok, want{over, 2, minute, 0, ""}, want{ok, 1, minute, 0, ""})
	if reasonOf(r) != "" {
		t.Fatalf("a counted hit has a reason: %v", r)
	}
	h.expect("counted", h.call("rl", s2), over, want{over, 2, minute, 0, ""})
}

// quota_mode, pre-paid (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): a
// request passes while one of its quota descriptors is within its limit;
// those over it answer OVER_LIMIT and are not charged; every quota
// descriptor over refuses the request, and charges nothing.
func TestCompatQuotaMode(t *testing.T) {
	example := compatData + "examples/example.yaml"
	f := newCompatFixture(t, readCompatCharged(t, example, new(policy.BeforeRequest)))
	s1, s2 := descr("service", "service_1"), descr("service", "service_2") // 1 and 2 a minute
	f.expect("both within", f.call("rl", s1, s2), ok, want{ok, 1, minute, 0, ""}, want{ok, 2, minute, 1, ""})
	f.expect("one over", f.call("rl", s1, s2), ok, want{over, 1, minute, 0, ""}, want{ok, 2, minute, 0, ""})
	f.expect("both over", f.call("rl", s1, s2), over, want{over, 1, minute, 0, ""}, want{over, 2, minute, 0, ""})
	f.clk.Add(30 * time.Second) // service_2 gets a token back, service_1 half of one
	f.expect("one back", f.call("rl", s2, s1), ok, want{ok, 2, minute, 0, ""}, want{over, 1, minute, 0, ""})

	g := newCompatFixture(t, readCompatCharged(t, example, new(policy.BeforeRequest)))
	user := descr("foo", "a", "bar", "bkthomps") // 1 a minute, not a quota
	g.expect("all within", g.call("rl", user, s2), ok, want{ok, 1, minute, 0, "bkthomps"}, want{ok, 2, minute, 1, ""})
	g.expect("a limit over", g.call("rl", user, s2), over, want{over, 1, minute, 0, "bkthomps"}, want{ok, 2, minute, 1, ""})
	g.expect("the quota was not charged", g.call("rl", s2), ok, want{ok, 2, minute, 0, ""})

	// A quota descriptor refused before the store is over its limit, its
	// status the tokens its bucket holds (checked, never charged).
	h := newCompatFixture(t, readCompatCharged(t, example, new(policy.BeforeRequest)))
	big := &ratelimitv3.RateLimitDescriptor{Entries: s2.Entries, HitsAddend: wrapperspb.UInt64(5)}
	h.expect("refused quota, other within", h.call("rl", big, s1), ok, want{over, 2, minute, 2, ""}, want{ok, 1, minute, 0, ""})
	r := h.call("rl", big)
	h.expect("refused quota alone", r, over, want{over, 2, minute, 2, ""})
	if reasonOf(r) == "" {
		t.Fatalf("no reason: %v", r)
	}
	h.expect("nothing charged", h.call("rl", s2), ok, want{ok, 2, minute, 1, ""})
}

// A repeat of a request id whose quota descriptors were partly over the
// limit replays both decisions: nothing is charged twice.
func TestQuotaRequestIDReplay(t *testing.T) {
	pol, err := policy.Parse("quota.yaml", []byte(`request_id_key: request_id
domains:
  edge:
    - {name: q1, match: [{key: q1}], capacity: 1, refill: 1/h, quota: true}
    - {name: q2, match: [{key: q2}], capacity: 3, refill: 1/h, quota: true}
    - {name: q3, match: [{key: q3}], capacity: 1, refill: 1/h, quota: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newCompatFixture(t, pol)
	q1, q2 := descr("q1", "x"), descr("q2", "x")
	f.call("edge", q1) // q1 is now empty
	id := descr("request_id", "r-1")
	for i := range 3 {
		r := f.call("edge", q1, q2, id)
		f.expect(fmt.Sprintf("attempt %d", i), r, ok, want{over, 1, hour, 0, "q1"}, want{ok, 1, hour, 2, "q2"}, want{code: ok, rpu: -1})
	}
	f.expect("charged once", f.call("edge", q2), ok, want{ok, 1, hour, 1, "q2"})

	// The first attempt empties q3: a repeat still gets the first answer.
	q3, id2 := descr("q3", "x"), descr("request_id", "r-2")
	for i := range 3 {
		f.expect(fmt.Sprintf("q3 attempt %d", i), f.call("edge", q1, q3, id2), ok, want{over, 1, hour, 0, "q1"}, want{ok, 1, hour, 0, "q3"}, want{code: ok, rpu: -1})
	}
}
