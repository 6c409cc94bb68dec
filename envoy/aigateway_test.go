package envoy_test

// examples/ai-gateway: LLM token budgets charged after the response. Its
// envoy.yaml route, and the rate limits Envoy Gateway makes of its
// backendtrafficpolicy.yaml (aigateway_eg_test.go), carry for each budget a
// check at request time and a report when the stream is done, with the
// same actions; their descriptors meet the example's policy.yaml, whose
// rules are post-paid; and tokengate, serving that policy over gRPC,
// answers the calls a user's requests make: the check passes, the report
// overdraws the budget and is charged whole (once, if retried with its
// request id), the next check is refused until the debt is repaid.

import (
	"context"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/server"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// aiGatewayCost is the response cost Envoy AI Gateway's filter leaves in
// the dynamic metadata (llmRequestCosts, TotalToken), as a hits_addend.
const aiGatewayCost = "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"

func aiGatewayFile(name string) string { return repoFile("examples", "ai-gateway", name) }

// aiGatewayPolicy parses the example's policy.yaml, fresh for each caller.
func aiGatewayPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	data, err := os.ReadFile(aiGatewayFile("policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return parsePolicy(t, "ai-gateway policy.yaml", data)
}

// aiGatewayBootstrap is the example's envoy.yaml, decoded and validated.
func aiGatewayBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	docs := yamlDocs(t, aiGatewayFile("envoy.yaml"))
	if len(docs) != 1 {
		t.Fatalf("envoy.yaml: %d documents", len(docs))
	}
	b, _ := loadBootstrap(t, "ai-gateway envoy.yaml", docs[0])
	return b
}

// TestAIGatewayEnvoyExample: envoy.yaml is a valid bootstrap that calls
// tokengate on this host over HTTP/2, whose descriptors meet the example's
// policy (every one a rule, every rule of domain llm met), and whose route
// pairs each check with its report.
func TestAIGatewayEnvoyExample(t *testing.T) {
	b := aiGatewayBootstrap(t)
	filter, hcm := rateLimitFilterOf(t, b)
	switch {
	case filter.GetDomain() != "llm":
		t.Errorf("domain %q", filter.GetDomain())
	case filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tokengate":
		t.Error("the filter does not call the tokengate cluster")
	case filter.GetEnableXRatelimitHeaders() != rlfilterv3.RateLimit_DRAFT_VERSION_03:
		t.Error("X-RateLimit headers are off")
	case hcm.GetPreserveExternalRequestId():
		t.Error("clients could choose the request id of their reports and replay old answers")
	}
	checkTokengateCluster(t, b, "127.0.0.1", 8081)

	pol := aiGatewayPolicy(t)
	checkCoverage(t, pol, "llm", checkDescriptors(t, pol, bootstrapDescriptors(t, b)))
	checkBudgetPairs(t, pol, "llm", routeRateLimits(t, b))
}

// routeRateLimits are the rate limits of the bootstrap's one route that
// has any (its RateLimitPerRoute).
func routeRateLimits(t *testing.T, b *bootstrapv3.Bootstrap) []*routev3.RateLimit {
	t.Helper()
	var found [][]*routev3.RateLimit
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if a := r.GetTypedPerFilterConfig()[rateLimitFilter]; a != nil {
							found = append(found, unpack[*rlfilterv3.RateLimitPerRoute](t, a).GetRateLimits())
						}
					}
				}
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d routes with rate limits, want 1", len(found))
	}
	return found[0]
}

// checkBudgetPairs: a route's rate limits are, for each budget, exactly
// one check (request time, hits_addend 0 or none) and one report (stream
// done, hits_addend AI Gateway's token count) with the same actions, on a
// post-paid rule; besides them only the request id, sent with the reports
// and costing nothing. Every rule of the domain is some pair's.
func checkBudgetPairs(t *testing.T, pol *policy.Policy, domain string, limits []*routev3.RateLimit) {
	t.Helper()
	var checks, reports []*routev3.RateLimit
	met := map[string]bool{}
	for i, rl := range limits {
		entries := entriesOf(t, rl, "")
		if len(entries) == 1 && entries[0].Key == pol.RequestIDKey() {
			if !rl.GetApplyOnStreamDone() || rl.GetHitsAddend() != nil {
				t.Errorf("rate limit %d: the request id goes with the reports, without hits_addend", i)
			}
			continue
		}
		r := pol.Match(domain, entries)
		if r == nil || !r.PostPaid() {
			t.Errorf("rate limit %d %v: meets no post-paid rule of domain %q", i, entries, domain)
			continue
		}
		met[r.Name] = true
		h := rl.GetHitsAddend()
		switch {
		case !rl.GetApplyOnStreamDone() && h != nil && (h.GetFormat() != "" || h.GetNumber().GetValue() != 0):
			// Above 0 a request-time cost is read as a report.
			t.Errorf("rate limit %d: a check's hits_addend must be 0 or none, not %q", i, costOf(rl))
		case !rl.GetApplyOnStreamDone():
			checks = append(checks, rl)
		case h.GetFormat() != aiGatewayCost:
			t.Errorf("rate limit %d: a report's hits_addend is %q, want %s", i, costOf(rl), aiGatewayCost)
		default:
			reports = append(reports, rl)
		}
	}
	for _, c := range checks {
		same := func(r *routev3.RateLimit) bool {
			return slices.EqualFunc(c.GetActions(), r.GetActions(), func(a, b *routev3.RateLimit_Action) bool { return proto.Equal(a, b) })
		}
		if n := len(slices.DeleteFunc(slices.Clone(reports), func(r *routev3.RateLimit) bool { return !same(r) })); n != 1 {
			t.Errorf("check %v: %d reports with its actions, want 1", entriesOf(t, c, ""), n)
		}
	}
	if len(checks) == 0 || len(reports) != len(checks) {
		t.Errorf("%d checks and %d reports, want as many of each", len(checks), len(reports))
	}
	checkCoverage(t, pol, domain, met)
}

// envoyCalls are the two calls Envoy makes to tokengate for one request
// on a route with these rate limits, the request having every header they
// read (entriesOf): at request time the entries without
// apply_on_stream_done, each with its own hits_addend; when the stream is
// done the others, AI Gateway's token count read as usage.
func envoyCalls(t *testing.T, domain string, limits []*routev3.RateLimit, usage uint64) (check, report *rlsv3.RateLimitRequest) {
	t.Helper()
	check, report = &rlsv3.RateLimitRequest{Domain: domain}, &rlsv3.RateLimitRequest{Domain: domain}
	for _, rl := range limits {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range entriesOf(t, rl, "") {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		switch h := rl.GetHitsAddend(); {
		case h.GetFormat() == aiGatewayCost:
			d.HitsAddend = wrapperspb.UInt64(usage)
		case h.GetFormat() != "":
			t.Fatalf("hits_addend %q: not understood by this test", h.GetFormat())
		case h.GetNumber() != nil:
			d.HitsAddend = wrapperspb.UInt64(h.GetNumber().GetValue())
		}
		if rl.GetApplyOnStreamDone() {
			report.Descriptors = append(report.Descriptors, d)
		} else {
			check.Descriptors = append(check.Descriptors, d)
		}
	}
	return check, report
}

// TestAIGatewayBudgets: the user's sequence, through tokengate's gRPC
// server serving the example's policy, for envoy.yaml's route and for
// Envoy Gateway's translation of the BackendTrafficPolicy: a check (OK,
// the whole budget left), a report of more than the budget (charged
// whole, OVER_LIMIT, which Envoy ignores), the next check (OVER_LIMIT,
// each budget until its debt is repaid and a token is back, retry-after
// the longest; a retried report is not charged again where Envoy retries
// calls), the same check without hits_addend (AI Gateway's
// request-time entry: the same answer), and once repaid a check that
// passes.
func TestAIGatewayBudgets(t *testing.T) {
	btp, _ := aiGatewayResources(t)
	egDomain, egLimits, _ := egRateLimits(t, btp)
	b := aiGatewayBootstrap(t)
	filter, _ := rateLimitFilterOf(t, b)
	for _, c := range []struct {
		name, domain string
		limits       []*routev3.RateLimit
		retried      bool // Envoy retries a failed call (Envoy Gateway sets no retry_policy)
	}{
		{"envoy.yaml", "llm", routeRateLimits(t, b), filter.GetRateLimitService().GetGrpcService().GetRetryPolicy() != nil},
		{"backendtrafficpolicy.yaml", egDomain, egLimits, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := aiGatewayPolicy(t)
			clk := new(clock.Fake)
			rls := startTokengate(t, pol, clk)
			const usage = 120000 // the tokens one response used
			check, report := envoyCalls(t, c.domain, c.limits, usage)
			var rules []*policy.Rule
			for _, d := range check.Descriptors {
				r := pol.Match(c.domain, descriptorEntries(d))
				if p := r.Version.Params; usage <= p.Capacity() || usage > p.Capacity()+p.MaxDebt() {
					t.Fatalf("rule %s: a usage of %d must overdraw it within max_debt %d", r.Name, usage, p.MaxDebt())
				}
				rules = append(rules, r)
			}
			call := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}

			resp := call(check)
			for i, s := range resp.GetStatuses() {
				if s.GetCode() != rlsv3.RateLimitResponse_OK || int64(s.GetLimitRemaining()) != rules[i].Version.Params.Capacity() {
					t.Errorf("check, %s: %v, want OK with the whole budget left", rules[i].Name, s)
				}
			}

			resp = call(report)
			for i, s := range resp.GetStatuses() {
				if r := pol.Match(c.domain, descriptorEntries(report.Descriptors[i])); r != nil &&
					(s.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || s.GetLimitRemaining() != 0) {
					t.Errorf("report, %s: %v, want OVER_LIMIT with nothing left", r.Name, s)
				}
			}
			// Where Envoy retries the call, the retried report gets the
			// first answer and is not charged again (its request id):
			// the check below finds one report's debt.
			if c.retried {
				if again := call(report); !proto.Equal(again, resp) {
					t.Errorf("the report retried: %v, want the first answer %v", again, resp)
				}
			}

			resp = call(check)
			var longest time.Duration
			for i, s := range resp.GetStatuses() {
				want := untilOneToken(t, rules[i], usage-rules[i].Version.Params.Capacity())
				longest = max(longest, want)
				if s.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || s.GetDurationUntilReset().AsDuration() != want {
					t.Errorf("check in debt, %s: %v, want OVER_LIMIT for %v", rules[i].Name, s, want)
				}
			}
			if got, want := retryAfter(resp), strconv.FormatInt(int64(longest/time.Second), 10); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || got != want {
				t.Errorf("check in debt: %v, retry-after %q, want OVER_LIMIT, %s", resp.GetOverallCode(), got, want)
			}

			none := proto.Clone(check).(*rlsv3.RateLimitRequest)
			for _, d := range none.Descriptors {
				d.HitsAddend = nil
			}
			if got := call(none); got.GetOverallCode() != resp.GetOverallCode() || retryAfter(got) != retryAfter(resp) ||
				!slices.EqualFunc(got.GetStatuses(), resp.GetStatuses(), func(a, b *rlsv3.RateLimitResponse_DescriptorStatus) bool { return proto.Equal(a, b) }) {
				t.Errorf("a check without hits_addend: %v, want %v", got, resp)
			}

			clk.Add(longest)
			if resp := call(check); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("check once repaid: %v", resp)
			}
		})
	}
}

// untilOneToken is how long a post-paid check of rule r waits in debt:
// until debt+1 tokens have refilled at the rule's rate, in whole seconds
// rounded up.
func untilOneToken(t *testing.T, r *policy.Rule, debt int64) time.Duration {
	t.Helper()
	rate := r.Version.Params.Rate()
	per, n := int64(rate.Per()), rate.Tokens()
	if debt+1 > math.MaxInt64/per {
		t.Fatalf("rule %s: a debt of %d overflows this test's arithmetic", r.Name, debt)
	}
	ns := ((debt+1)*per + n - 1) / n
	return time.Duration((ns + int64(time.Second) - 1) / int64(time.Second) * int64(time.Second))
}

func descriptorEntries(d *ratelimitv3.RateLimitDescriptor) []policy.Entry {
	var es []policy.Entry
	for _, e := range d.GetEntries() {
		es = append(es, policy.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	return es
}

func retryAfter(resp *rlsv3.RateLimitResponse) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == service.HeaderRetryAfter {
			return h.GetValue()
		}
	}
	return ""
}

// startTokengate serves pol from a memory store on clk through tokengate's
// gRPC server on 127.0.0.1, until the test ends.
func startTokengate(t *testing.T, pol *policy.Policy, clk clock.Clock) rlsv3.RateLimitServiceClient {
	t.Helper()
	pol.Activate()
	current := func() *policy.Policy { return pol }
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	log := slog.New(slog.DiscardHandler)
	svc, err := service.New(service.Options{Policy: current, Store: memory.New(memory.Options{Clock: clk}), StoreName: "memory",
		Metrics: m, Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", RateLimit: svc, Metrics: m, Gatherer: reg,
		Policy: current, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}
