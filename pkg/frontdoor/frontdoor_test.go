package frontdoor

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

const testPolicy = `domains:
  edge:
    - name: per-client
      match: [{key: remote_address}]
      capacity: 2
      refill: 1/s
    - name: per-user
      match: [{key: user_id}, {key: path, value: /api/*}]
      capacity: 10
      refill: 1/s
    - name: shadow-host
      match: [{key: host}]
      capacity: 1
      refill: 1/h
      shadow: true
  other:
    - name: all
      match: [{key: generic_key}]
      capacity: 1
      refill: 1/m
front_doors:
  ext_authz:
    default_domain: edge
    domains:
      edge:
        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: x-user, descriptor_key: user_id}
            - path: {strip_query: true}
          hits_addend: {request_header: x-cost}
        - actions: [{host: {}}]
      other:
        - actions: [{generic_key: {descriptor_value: everyone}}]
  forward_auth:
    trusted_proxy_hops: 1
    original_request: x-original
    domains:
      edge:
        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: x-user, descriptor_key: user_id}
            - path: {}
`

type fixture struct {
	doors *Doors
	clk   *clock.Fake
	m     *metrics.FrontDoors
}

// newFixture is Doors on the policy pol, a memory store and a fake clock,
// with the service's options changed by tweaks before New.
func newFixture(t testing.TB, pol string, tweaks ...func(*service.Options)) *fixture {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(pol))
	if err != nil {
		t.Fatal(err)
	}
	p.Activate()
	clk := new(clock.Fake)
	reg := prometheus.NewRegistry()
	o := service.Options{
		Policy: func() *policy.Policy { return p }, Store: memory.New(memory.Options{Clock: clk}),
		StoreName: "memory", Metrics: metrics.New(reg), Clock: clk,
	}
	for _, tweak := range tweaks {
		tweak(&o)
	}
	svc, err := service.New(o)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewFrontDoors(reg)
	d, err := New(Options{Service: svc, Policy: func() *policy.Policy { return p }, Metrics: m, Logger: slog.New(slog.DiscardHandler), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{d, clk, m}
}

func checkRequest(peer string, headers map[string]string, path string, ext map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: peer, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: path, Host: "api.example.com", Scheme: "https", Headers: headers,
		}},
		ContextExtensions: ext,
	}}
}

func headerOf(opts []*corev3.HeaderValueOption, key string) string {
	for _, o := range opts {
		if o.Header.Key == key {
			return o.Header.Value
		}
	}
	return ""
}

func TestCheck(t *testing.T) {
	f := newFixture(t, testPolicy)
	ea := f.doors.ExtAuthz()
	ctx := context.Background()
	req := checkRequest("10.0.0.1", map[string]string{"x-user": "alice", "x-forwarded-for": "6.6.6.6"}, "/api/x?q=1", nil)
	resp, err := ea.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ok := resp.GetOkResponse()
	if codes.Code(resp.Status.Code) != codes.OK || ok == nil {
		t.Fatalf("first: %v", resp)
	}
	hs := ok.ResponseHeadersToAdd
	for k, want := range map[string]string{
		"ratelimit-policy":      `"per-client";q=2;w=2, "per-user";q=10;w=10`,
		"ratelimit":             `"per-client";r=1;t=1, "per-user";r=9;t=1`,
		"x-ratelimit-limit":     `1, 1;w=1;name="per-client", 1;w=1;name="per-user"`,
		"x-ratelimit-remaining": "1",
		"x-ratelimit-reset":     "1",
	} {
		if got := headerOf(hs, k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	// The second request empties per-client (the spoofed X-Forwarded-For is
	// not trusted with 0 hops); the third is denied.
	ea.Check(ctx, req)
	resp, _ = ea.Check(ctx, req)
	den := resp.GetDeniedResponse()
	if codes.Code(resp.Status.Code) != codes.PermissionDenied || den == nil || den.Status.Code != 429 {
		t.Fatalf("third: %v", resp)
	}
	if headerOf(den.Headers, "retry-after") != "1" || headerOf(den.Headers, "ratelimit") != `"per-client";r=0;t=1, "per-user";r=8;t=2` ||
		headerOf(den.Headers, "content-type") != "application/problem+json" {
		t.Fatalf("denied headers: %v", den.Headers)
	}
	var body struct {
		Status   int
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(den.Body), &body); err != nil || body.Status != 429 || len(body.Violated) != 1 || body.Violated[0] != "per-client" {
		t.Fatalf("body %q: %v", den.Body, err)
	}
	// Another client, a cost of 10 for alice: per-user (8 left) refuses.
	req2 := checkRequest("10.0.0.2", map[string]string{"x-user": "alice", "x-cost": "10"}, "/api/x?z=2", nil)
	if resp, _ := ea.Check(ctx, req2); resp.GetDeniedResponse() == nil {
		t.Fatalf("cost 10 of 8: %v", resp)
	}
	req2.Attributes.Request.Http.Headers["x-cost"] = "lots"
	resp, _ = ea.Check(ctx, req2)
	if r := resp.GetDynamicMetadata().GetFields()[service.MetaReason].GetStringValue(); resp.GetDeniedResponse() == nil || !strings.Contains(r, "not a whole number") {
		t.Fatalf("bad cost: %v", resp)
	}
	// Headers missing: only the remote address applies.
	resp, _ = ea.Check(ctx, checkRequest("10.0.0.3", nil, "/api/x", nil))
	if headerOf(resp.GetOkResponse().GetResponseHeadersToAdd(), "ratelimit") != `"per-client";r=1;t=1` {
		t.Fatalf("no user: %v", resp)
	}
	// Domain by context extension; an unknown one is an error for Envoy's
	// failure mode, not a decision.
	other := checkRequest("10.0.0.4", nil, "/", map[string]string{"domain": "other"})
	if resp, _ := ea.Check(ctx, other); resp.GetOkResponse() == nil {
		t.Fatalf("other: %v", resp)
	}
	if resp, _ := ea.Check(ctx, other); resp.GetDeniedResponse() == nil {
		t.Fatalf("other, twice: %v", resp)
	}
	other.Attributes.ContextExtensions["domain"] = "nope"
	if _, err := ea.Check(ctx, other); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown domain: %v", err)
	}
	for res, want := range map[string]float64{"ok": 4, "over_limit": 3, "refused": 1, "bad_request": 1} {
		if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("ext_authz", res)); got != want {
			t.Errorf("ext_authz %s: %v, want %v", res, got, want)
		}
	}
}

func TestCheckNotConfigured(t *testing.T) {
	f := newFixture(t, strings.Split(testPolicy, "front_doors:")[0])
	if _, err := f.doors.ExtAuthz().Check(context.Background(), checkRequest("10.0.0.1", nil, "/", nil)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("no section: %v", err)
	}
	w := httptest.NewRecorder()
	f.doors.ForwardAuth().ServeHTTP(w, httptest.NewRequest("GET", "/v1/check", nil))
	if w.Code != 500 || !strings.Contains(w.Body.String(), "no front_doors.forward_auth section") {
		t.Fatalf("no section: %d %s", w.Code, w.Body)
	}
}

func TestForwardAuth(t *testing.T) {
	f := newFixture(t, testPolicy)
	h := f.doors.ForwardAuth()
	do := func(xff, url string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/check", nil)
		r.RemoteAddr = "10.1.1.1:5000" // the ingress
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("X-Original-URL", url)
		r.Header.Set("X-Original-Method", "POST")
		r.Header.Set("X-User", "bob")
		r.Header.Set("X-Forwarded-Uri", "/spoofed") // not read with x-original
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do("6.6.6.6, 1.2.3.4", "https://api.example.com/api/a?x=1")
	if w.Code != 200 || w.Header().Get("RateLimit") != `"per-client";r=1;t=1, "per-user";r=9;t=1` {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	do("7.7.7.7, 1.2.3.4", "https://api.example.com/api/a")
	w = do("1.2.3.4", "https://api.example.com/api/b")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("third from 1.2.3.4: %d %v", w.Code, w.Header())
	}
	f.clk.Add(time.Second)
	if w := do("1.2.3.4", "https://api.example.com/api/b"); w.Code != 200 {
		t.Fatalf("a second later: %d", w.Code)
	}
}

func TestAttributes(t *testing.T) {
	r := httptest.NewRequest("GET", "http://tokengate:8080/v1/check", nil)
	r.RemoteAddr = "[::1]:9999"
	r.Header.Set("X-Forwarded-Method", "DELETE")
	r.Header.Set("X-Forwarded-Uri", "/a?b")
	r.Header.Set("X-Forwarded-Host", "h.example")
	r.Header.Set("X-Forwarded-Proto", "https")
	r.Header.Set("X-Original-URI", "/orig")
	r.Header.Set("X-Scheme", "http")
	fwd := &spec.Door{OriginalRequest: spec.OriginalXForwarded}
	if a := attributes(fwd, r); a.Method != "DELETE" || a.Path != "/a?b" || a.Host != "h.example" || a.Scheme != "https" || a.RemoteAddress != "::1" {
		t.Errorf("x-forwarded: %+v", a)
	}
	orig := &spec.Door{OriginalRequest: spec.OriginalXOriginal}
	if a := attributes(orig, r); a.Method != "" || a.Path != "/orig" || a.Host != "tokengate:8080" || a.Scheme != "http" {
		t.Errorf("x-original without URL: %+v", a)
	}
	for u, want := range map[string][3]string{
		"https://h:8443/p/q?x=%2F": {"https", "h:8443", "/p/q?x=%2F"},
		"http://h":                 {"http", "h", "/"},
		"http://h?x":               {"http", "h", "/?x"},
		"/only/a/path":             {"", "", "/only/a/path"},
	} {
		if s, h, p := splitURL(u); [3]string{s, h, p} != want {
			t.Errorf("splitURL(%q) = %q %q %q", u, s, h, p)
		}
	}
}

func TestRateLimitCounted(t *testing.T) {
	f := newFixture(t, testPolicy)
	rl := f.doors.RateLimit(okServer{})
	rl.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{})
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("ratelimit", "ok")); got != 1 {
		t.Fatalf("ratelimit ok: %v", got)
	}
}

type okServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestCheckNormalisesPath: ext_authz reads the path normalised, so
// spellings of /api/x share alice's per-user bucket.
func TestCheckNormalisesPath(t *testing.T) {
	f := newFixture(t, testPolicy)
	ea := f.doors.ExtAuthz()
	for i, path := range []string{"/api/x", "//api/x", "/api/./x?q=1", "/api/%78", "/api/y/../x"} {
		resp, err := ea.Check(context.Background(), checkRequest("10.0.1."+strconv.Itoa(i), map[string]string{"x-user": "alice"}, path, nil))
		want := `"per-client";r=1;t=1, "per-user";r=` + strconv.Itoa(9-i) + `;t=` + strconv.Itoa(i+1)
		if err != nil || headerOf(resp.GetOkResponse().GetResponseHeadersToAdd(), "ratelimit") != want {
			t.Fatalf("%s: %v %v, want RateLimit %s", path, resp, err, want)
		}
	}
}
