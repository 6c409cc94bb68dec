package service

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// TestDynamicMetadata: an OK answer carries no metadata; a limited one
// says, for each limited descriptor, the domain, rule, hashed key (never
// the client's value), cost, remaining, retry-after and reason, and its
// top level is the descriptor that decided. current_limit.name is the rule.
func TestDynamicMetadata(t *testing.T) {
	f := newFixture(t, nil)
	for range 5 {
		if r := f.call(t, 0, descr("user_id", "jill-secret")); r.DynamicMetadata != nil {
			t.Fatalf("an OK answer carries metadata: %v", r.DynamicMetadata)
		}
	}
	f.clk.Add(300 * time.Millisecond)
	r := f.call(t, 0, descr("path", "/healthz"), descr("user_id", "jill-secret"), descr("remote_address", "10.0.0.1"))
	if r.Statuses[1].CurrentLimit.GetName() != "per-user" {
		t.Fatalf("current_limit.name %q", r.Statuses[1].CurrentLimit.GetName())
	}
	md := r.DynamicMetadata.GetFields()
	if md == nil {
		t.Fatal("an OVER_LIMIT answer without metadata")
	}
	js, _ := protojson.Marshal(r.DynamicMetadata)
	if strings.Contains(string(js), "jill") || strings.Contains(string(js), "10.0.0.1") {
		t.Fatalf("a client's value in the metadata: %s", js)
	}
	key := md[MetaKey].GetStringValue()
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(key) {
		t.Fatalf("key %q: want %d hex digits", key, keyhash.Length)
	}
	want := map[string]any{
		MetaDomain: "edge", MetaRule: "per-user", MetaResult: "over_limit", MetaCost: 1.0,
		MetaRemaining: 0.0, MetaRetryAfter: 1.0, MetaDegraded: false,
	}
	for k, w := range want {
		if got := md[k].AsInterface(); got != w {
			t.Errorf("%s: %v, want %v", k, got, w)
		}
	}
	if _, ok := md[MetaDescriptors]; ok {
		t.Fatalf("one descriptor limited, yet a list: %v", md)
	}
	// Two limited: the top level is the first, and both are listed; each
	// bucket its own key, the same bucket the same key.
	for range 5 {
		f.call(t, 0, descr("user_id", "kim"))
	}
	two := f.call(t, 0, descr("user_id", "kim"), descr("path", "/healthz"), descr("user_id", "jill-secret")).DynamicMetadata.GetFields()
	list := two[MetaDescriptors].GetListValue().GetValues()
	if len(list) != 2 {
		t.Fatalf("descriptors %v: want the two limited (not the unlimited)", list)
	}
	first, second := list[0].GetStructValue().GetFields(), list[1].GetStructValue().GetFields()
	if first[MetaIndex].GetNumberValue() != 0 || second[MetaIndex].GetNumberValue() != 2 || second[MetaKey].GetStringValue() != key ||
		first[MetaKey].GetStringValue() == key || two[MetaKey].GetStringValue() != first[MetaKey].GetStringValue() ||
		second[MetaRule].GetStringValue() != "per-user" || second[MetaRetryAfter].GetNumberValue() != 1 {
		t.Fatalf("descriptors: %v", list)
	}
	if _, ok := first[MetaDomain]; ok {
		t.Fatalf("the domain is said once, at the top: %v", first)
	}
	if n := two[MetaCount].GetNumberValue(); n != 2 {
		t.Fatalf("count %v, want 2", n)
	}
}

// TestDynamicMetadataBounded: a request of many degraded descriptors lists
// the first MaxMetaDescriptors, and counts them all.
func TestDynamicMetadataBounded(t *testing.T) {
	svc, flaky, _ := flakyService(t, "local.yaml", localPolicy)
	flaky.fail = true
	var ds []*ratelimitv3.RateLimitDescriptor
	for i := range 20 {
		ds = append(ds, descr("path", "/p"+strings.Repeat("x", i)))
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	md := resp.DynamicMetadata.GetFields()
	list := md[MetaDescriptors].GetListValue().GetValues()
	if len(list) != MaxMetaDescriptors || md[MetaCount].GetNumberValue() != 20 ||
		list[MaxMetaDescriptors-1].GetStructValue().GetFields()[MetaIndex].GetNumberValue() != MaxMetaDescriptors-1 {
		t.Fatalf("%d listed, count %v", len(list), md[MetaCount])
	}
}

// TestDynamicMetadataRefusedAndDegraded: a refusal says its reason, and
// what its bucket holds; a degraded answer that allowed says so, with the rule's on_store_error
// result, though the request went through.
func TestDynamicMetadataRefusedAndDegraded(t *testing.T) {
	f := newFixture(t, nil)
	up := descr("user_id", "lee", "path", "/upload/a")
	r := f.call(t, 11, up)
	md := r.DynamicMetadata.GetFields()
	if md[MetaResult].GetStringValue() != "refused" || !strings.Contains(md[MetaReason].GetStringValue(), "max_cost 10") ||
		md[MetaCost].GetNumberValue() != 11 || md[MetaRetryAfter].GetNumberValue() != 0 {
		t.Fatalf("refused: %v", md)
	}
	if md[MetaKey].GetStringValue() == "" || md[MetaRemaining].GetNumberValue() != 20 {
		t.Fatalf("a cost above max_cost: its bucket's key and the 20 tokens it holds (checked at cost 0): %v", md)
	}

	svc, flaky, _ := flakyService(t, "local.yaml", localPolicy)
	flaky.fail = true
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("path", "/p")}})
	if err != nil {
		t.Fatal(err)
	}
	md = resp.DynamicMetadata.GetFields()
	if resp.OverallCode != ok || md[MetaResult].GetStringValue() != "store_error" || !md[MetaDegraded].GetBoolValue() || md[MetaRule].GetStringValue() != "open" {
		t.Fatalf("degraded: %v %v", resp.OverallCode, md)
	}
}

// capture is a slog handler that keeps every record.
type capture struct {
	mu    sync.Mutex
	level slog.Level
	recs  []slog.Record
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.level }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c *capture) WithGroup(string) slog.Handler                { return c }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}

// take returns the records so far, as message and attributes, and forgets them.
func (c *capture) take() []map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]string
	for _, r := range c.recs {
		m := map[string]string{"msg": r.Message, "level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	c.recs = nil
	return out
}

func memoryStore(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }

func decisionLogFixture(t *testing.T, level slog.Level, perSecond int) (*fixture, *capture) {
	t.Helper()
	c := &capture{level: level}
	f := newFixtureWith(t, testPolicy, memoryStore, func(o *Options) {
		o.DecisionLog = DecisionLog{Logger: slog.New(c), PerSecond: perSecond}
	})
	return f, c
}

// TestDecisionLog: at info, each refusal is a line with the rule, hashed
// key, cost, remaining, retry-after and reason, and allowed requests log
// nothing; at most PerSecond lines a second, the next line saying how many
// were dropped.
func TestDecisionLog(t *testing.T) {
	f, c := decisionLogFixture(t, slog.LevelInfo, 3)
	for range 5 {
		f.call(t, 0, descr("user_id", "mo"))
	}
	if got := c.take(); len(got) != 0 {
		t.Fatalf("allowed requests logged at info: %v", got)
	}
	for range 10 {
		f.call(t, 0, descr("user_id", "mo"))
	}
	got := c.take()
	if len(got) != 3 {
		t.Fatalf("10 refusals in one second: %d lines, want 3: %v", len(got), got)
	}
	l := got[0]
	for k, w := range map[string]string{"msg": MsgLimited, "level": "INFO", MetaDomain: "edge", MetaRule: "per-user",
		MetaResult: "over_limit", "code": "OVER_LIMIT", MetaCost: "1", MetaRemaining: "0", MetaRetryAfter: "1s"} {
		if l[k] != w {
			t.Errorf("%s: %q, want %q (%v)", k, l[k], w, l)
		}
	}
	if len(l[MetaKey]) != keyhash.Length || strings.Contains(strings.Join(values(l), " "), "mo\"") {
		t.Errorf("key %q", l[MetaKey])
	}
	if _, ok := got[2]["dropped"]; ok {
		t.Errorf("nothing dropped yet: %v", got[2])
	}
	f.clk.Add(time.Second) // the next second: one token, then a refusal
	f.call(t, 0, descr("user_id", "mo"))
	f.call(t, 0, descr("user_id", "mo"))
	if got := c.take(); len(got) != 1 || got[0]["dropped"] != "7" {
		t.Fatalf("the next second's first line: %v, want dropped=7", got)
	}
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestDecisionLogDebug: at debug every decision is a line, the request id
// left out; refusals stay at info, each level with its own budget.
func TestDecisionLogDebug(t *testing.T) {
	f, c := decisionLogFixture(t, slog.LevelDebug, 2)
	f.call(t, 0, descr("request_id", "r"), descr("user_id", "ned"), descr("nobody", "x"), descr("path", "/healthz"))
	got := c.take()
	if len(got) != 2 || got[0]["msg"] != MsgDecision || got[0][MetaResult] != "ok" || got[0]["level"] != "DEBUG" || got[1][MetaResult] != "no_rule" {
		t.Fatalf("4 descriptors: %v", got)
	}
	if _, ok := got[1][MetaRule]; ok {
		t.Fatalf("no rule, yet a rule: %v", got[1])
	}
	f.clk.Add(time.Second)
	for range 5 {
		f.call(t, 0, descr("user_id", "ned"))
	}
	f.call(t, 0, descr("user_id", "ned"))
	f.call(t, 0, descr("user_id", "ned"))
	got = c.take()
	levels := ""
	for _, l := range got {
		levels += l["level"][:1]
	}
	if levels != "DDII" {
		t.Fatalf("levels %q, want 2 debug lines (the budget) and both refusals at info: %v", levels, got)
	}
}

// TestDecisionLogRefusedRemaining: a cost above max_cost is logged with
// the tokens its bucket holds, not 0, and nothing is charged.
func TestDecisionLogRefusedRemaining(t *testing.T) {
	f, c := decisionLogFixture(t, slog.LevelInfo, 10)
	up := descr("user_id", "kai", "path", "/upload/a") // capacity 20, max_cost 10
	f.call(t, 11, up)
	f.call(t, 11, up)
	got := c.take()
	if len(got) != 2 {
		t.Fatalf("lines %v, want 2", got)
	}
	for _, l := range got {
		if l[MetaResult] != "refused" || l[MetaRemaining] != "20" || len(l[MetaKey]) != keyhash.Length {
			t.Errorf("refused, 20 remaining, its key: %v", l)
		}
	}
}

// TestDecisionLogClipsDomain: ShouldRateLimit bounds no domain; a line
// carries a long one clipped.
func TestDecisionLogClipsDomain(t *testing.T) {
	f, c := decisionLogFixture(t, slog.LevelDebug, 2)
	long := strings.Repeat("d", 60_000)
	if _, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: long, Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "x")}}); err != nil {
		t.Fatal(err)
	}
	got := c.take()
	if want := logbudget.Clip(long); len(got) != 1 || got[0][MetaDomain] != want {
		t.Fatalf("lines %.300v, want one with domain %q", got, want)
	}
}

// TestDecisionLogDegraded: a degraded answer is logged at info as one,
// whatever it answered: on_store_error deny too, which reached no limit.
func TestDecisionLogDegraded(t *testing.T) {
	c := &capture{level: slog.LevelInfo}
	f := newFixtureWith(t, localPolicy, func(*clock.Fake) store.Store { return &switchable{fail: true} }, func(o *Options) {
		o.StoreName, o.Logger, o.DecisionLog = "redis", slog.New(slog.DiscardHandler), DecisionLog{Logger: slog.New(c)}
	})
	if _, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("path", "/p"), descr("tenant", "t")}}); err != nil {
		t.Fatal(err)
	}
	got := c.take()
	if len(got) != 2 || got[0]["msg"] != MsgDegraded || got[0][MetaDegraded] != "true" || got[0]["code"] != "OK" ||
		got[1]["msg"] != MsgDegraded || got[1][MetaRule] != "strict" || got[1]["code"] != "OVER_LIMIT" || got[1][MetaDegraded] != "true" {
		t.Fatalf("allow and deny while the store fails: %v", got)
	}
}

// TestMetadataIsAStruct: the metadata is a Struct Envoy can read: its
// JSON form round-trips.
func TestMetadataIsAStruct(t *testing.T) {
	f := newFixture(t, nil)
	r := f.call(t, 11, descr("user_id", "o", "path", "/upload/a"))
	js, err := protojson.Marshal(r.DynamicMetadata)
	if err != nil {
		t.Fatal(err)
	}
	var back structpb.Struct
	if err := protojson.Unmarshal(js, &back); err != nil || len(back.Fields) != len(r.DynamicMetadata.Fields) {
		t.Fatalf("%s: %v", js, err)
	}
}

// TestSpan: with a tracer, a decision is one span, a child of the trace
// in the context, with the domain, rules, results, code and store timing;
// a store failure marks it an error.
func TestSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var flaky *switchable
	f := newFixtureWith(t, testPolicy, func(clk *clock.Fake) store.Store {
		flaky = &switchable{ok: memory.New(memory.Options{Clock: clk})}
		return flaky
	}, func(o *Options) { o.Logger, o.Tracer = slog.New(slog.DiscardHandler), tp.Tracer("test") })
	svc := f.svc
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("request_id", "r"), descr("user_id", "pat"), descr("nobody", "x")}}
	if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	flaky.fail = true
	if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	sp := spans[0]
	if sp.Name() != SpanName || sp.Parent().TraceID() != parent.TraceID() || sp.Parent().SpanID() != parent.SpanID() || sp.SpanKind() != trace.SpanKindServer {
		t.Fatalf("span %s, parent %v", sp.Name(), sp.Parent())
	}
	attrs := map[string]string{}
	for _, a := range sp.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, w := range map[string]string{AttrDomain: "edge", AttrRules: `["per-user"]`, AttrResults: `["ok","no_rule"]`, AttrCode: "OK",
		AttrDegraded: "false", AttrStore: "memory", AttrStoreDuration: "0"} {
		if attrs[k] != w {
			t.Errorf("%s = %q, want %q", k, attrs[k], w)
		}
	}
	if st := spans[1].Status(); st.Code != otelcodes.Error || len(spans[1].Events()) != 1 {
		t.Errorf("store failure: status %v, events %v", st, spans[1].Events())
	}
}

// TestReplacedResult: a descriptor whose rule another of the request
// replaces is answered as no rule, but said to be replaced: in the
// decision log and in tokengate_decisions_total; a not_limited one, and
// one no rule matched, stay no_rule.
func TestReplacedResult(t *testing.T) {
	c := &capture{level: slog.LevelDebug}
	f := newFixtureWith(t, `domains:
  edge:
    - {name: per-user, match: [{key: user}], capacity: 5, refill: 5/m}
    - {name: vip, match: [{key: tier, value: vip}], capacity: 9, refill: 9/m, replaces: [per-user]}
    - {name: free, match: [{key: path}], not_limited: true}
`, memoryStore, func(o *Options) { o.DecisionLog = DecisionLog{Logger: slog.New(c)} })
	f.call(t, 0, descr("user", "a"), descr("tier", "vip"), descr("path", "/p"), descr("other", "x"))
	got := c.take()
	var results []string
	for _, l := range got {
		results = append(results, l[MetaResult])
	}
	if strings.Join(results, " ") != "replaced ok no_rule no_rule" {
		t.Fatalf("results %q, want replaced ok no_rule no_rule: %v", results, got)
	}
	for res, want := range map[string]float64{metrics.ResultReplaced: 1, metrics.ResultNoRule: 2} {
		if n := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "", res)); n != want {
			t.Errorf("tokengate_decisions_total{domain=edge,rule=\"\",result=%s} = %v, want %v", res, n, want)
		}
	}
}
