package frontdoor

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// policyTemplate limits per client address, per user and uploads per user (with a
// cost from a header), and maps both front doors to the same rules. The
// refill is slow so that nothing refills during a test.
const policyTemplate = `revision: 1
domains:
  edge:
    - name: per-client
      match: [{key: remote_address}]
      capacity: 3
      refill: 1/h
    - name: per-user
      match: [{key: user_id}]
      capacity: 5
      refill: 1/h
    - name: uploads
      match: [{key: user_id}, {key: path, value: /upload/*}]
      capacity: 10
      refill: 1/h
front_doors:
  ext_authz:
    domains:
      edge: DESCRIPTORS
  forward_auth:
    trusted_proxy_hops: 1
    original_request: x-forwarded
    domains:
      edge: DESCRIPTORS
`

// policyFor returns the test policy, the same descriptors for both front
// doors (the policy refuses YAML aliases), with forward_auth reading the
// given original_request and trusting hops proxies.
func policyFor(original string, hops int) string {
	desc := `
        - actions: [{remote_address: {}}]
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
        - actions:
            - request_headers: {header_name: x-user-id, descriptor_key: user_id}
            - path: {strip_query: true}
          hits_addend: {request_header: x-upload-size}`
	p := strings.ReplaceAll(policyTemplate, "edge: DESCRIPTORS", "edge:"+desc)
	p = strings.Replace(p, "original_request: x-forwarded", "original_request: "+original, 1)
	return strings.Replace(p, "trusted_proxy_hops: 1", "trusted_proxy_hops: "+strconv.Itoa(hops), 1)
}

// checkRequest is what Envoy's ext_authz filter sends: the downstream peer
// as the source, the request's method, path, host, scheme and headers.
func checkRequest(source, path string, headers map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51000}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: "POST", Path: path, Host: "app.example.com", Scheme: "https", Protocol: "HTTP/2", Headers: headers,
		}},
	}}
}

func okHeader(r *authv3.CheckResponse, key string) string {
	for _, h := range r.GetOkResponse().GetResponseHeadersToAdd() {
		if h.Header.Key == key {
			return h.Header.Value
		}
	}
	return ""
}

func deniedHeader(r *authv3.CheckResponse, key string) string {
	for _, h := range r.GetDeniedResponse().GetHeaders() {
		if h.Header.Key == key {
			return h.Header.Value
		}
	}
	return ""
}

type problem struct {
	Type     string   `json:"type"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func TestExtAuthz(t *testing.T) {
	p := start(t, policyFor("x-forwarded", 1))

	t.Run("allowed then denied with 429 and headers", func(t *testing.T) {
		req := checkRequest("203.0.113.10", "/api/a?x=1", map[string]string{"x-user-id": "alice"})
		for i := range 3 {
			r := p.check(t, req)
			if codes.Code(r.Status.GetCode()) != codes.OK || r.GetOkResponse() == nil {
				t.Fatalf("request %d: %v", i, r)
			}
			want := `"per-client";r=` + strconv.Itoa(2-i) + `;t=` + strconv.Itoa(3600*(i+1)) + `, "per-user";r=` + strconv.Itoa(4-i) + `;t=` + strconv.Itoa(3600*(i+1))
			if got := okHeader(r, "ratelimit"); got != want {
				t.Fatalf("request %d: RateLimit %q, want %q", i, got, want)
			}
		}
		r := p.check(t, req)
		den := r.GetDeniedResponse()
		if codes.Code(r.Status.GetCode()) != codes.PermissionDenied || den == nil || den.Status.GetCode() != 429 {
			t.Fatalf("fourth: %v", r)
		}
		for k, want := range map[string]string{
			"retry-after":           "3600",
			"ratelimit-policy":      `"per-client";q=3;w=10800, "per-user";q=5;w=18000`,
			"ratelimit":             `"per-client";r=0;t=3600, "per-user";r=2;t=10800`,
			"x-ratelimit-limit":     `1, 1;w=3600;name="per-client", 1;w=3600;name="per-user"`,
			"x-ratelimit-remaining": "0",
			"x-ratelimit-reset":     "3600",
			"content-type":          "application/problem+json",
		} {
			if got := deniedHeader(r, k); got != want {
				t.Errorf("%s: %q, want %q", k, got, want)
			}
		}
		var pb problem
		if err := json.Unmarshal([]byte(den.Body), &pb); err != nil || pb.Status != 429 || len(pb.Violated) != 1 || pb.Violated[0] != "per-client" {
			t.Fatalf("body %q: %v", den.Body, err)
		}
	})
	t.Run("headers missing: those descriptors are skipped", func(t *testing.T) {
		r := p.check(t, checkRequest("203.0.113.11", "/api/a", nil))
		if r.GetOkResponse() == nil || okHeader(r, "ratelimit") != `"per-client";r=2;t=3600` {
			t.Fatalf("no x-user-id: %v", r)
		}
	})
	t.Run("cost header", func(t *testing.T) {
		up := func(source, size string) *authv3.CheckResponse {
			return p.check(t, checkRequest(source, "/upload/photo?part=1", map[string]string{"x-user-id": "bob", "x-upload-size": size}))
		}
		if r := up("203.0.113.12", "8"); !strings.Contains(okHeader(r, "ratelimit"), `"uploads";r=2;`) {
			t.Fatalf("cost 8: %v", r)
		}
		r := up("203.0.113.13", "3")
		if r.GetDeniedResponse() == nil || !strings.Contains(deniedHeader(r, "ratelimit"), `"uploads";r=2;`) {
			t.Fatalf("cost 3 of 2: %v", r)
		}
		// All or nothing: the refused request charged neither bob nor the client.
		if r := up("203.0.113.13", "2"); !strings.Contains(okHeader(r, "ratelimit"), `"per-client";r=2;t=3600, "per-user";r=3;t=7200`) {
			t.Fatalf("cost 2 after the refusal: %v", r)
		}
		r = up("203.0.113.14", "lots")
		if r.GetDeniedResponse() == nil || deniedHeader(r, "x-tokengate-reason") != "" ||
			!strings.Contains(r.GetDynamicMetadata().GetFields()["reason"].GetStringValue(), `cost header x-upload-size: "lots" is not a whole number`) {
			t.Fatalf("bad cost: %v, want denied, the reason in the metadata alone", r)
		}
	})
	t.Run("a domain the front door does not serve is an error, for failure_mode_allow", func(t *testing.T) {
		req := checkRequest("203.0.113.15", "/", nil)
		req.Attributes.ContextExtensions = map[string]string{"domain": "elsewhere"}
		ctx := context.Background()
		if _, err := p.authz.Check(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v", err)
		}
	})
	if got := p.Metric(t, `tokengate_front_door_requests_total{front_door="ext_authz",result="over_limit"}`); got != "2" {
		t.Errorf("ext_authz over_limit counted %q", got)
	}
	if got := p.Metric(t, `tokengate_front_door_requests_total{front_door="ext_authz",result="refused"}`); got != "1" {
		t.Errorf("ext_authz refused counted %q", got)
	}
}

// The headers each ingress sends to the forward-auth endpoint, for a client
// at 198.51.100.7 asking GET https://app.example.com/upload/a?page=2 as
// user carol. The client also sent headers of the other convention, which
// must not be read.
var ingresses = []struct {
	name     string
	original string
	headers  map[string]string
}{
	{"traefik", "x-forwarded", map[string]string{ // ForwardAuth: X-Forwarded-* set, original headers copied
		"X-Forwarded-Method": "GET", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "app.example.com",
		"X-Forwarded-Uri": "/upload/a?page=2", "X-Forwarded-For": "198.51.100.7",
		"X-User-Id": "carol", "X-Original-URL": "https://app.example.com/static/spoofed",
	}},
	{"caddy", "x-forwarded", map[string]string{ // forward_auth: a reverse_proxy with X-Forwarded-Method/Uri
		"Host": "app.example.com", "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/upload/a?page=2",
		"X-Forwarded-Host": "app.example.com", "X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.7",
		"X-User-Id": "carol", "X-Original-URI": "/static/spoofed",
	}},
	{"ingress-nginx", "x-original", map[string]string{ // auth-url location of ingress-nginx's template
		"Host": "tokengate.tokengate.svc.cluster.local", "X-Original-URL": "https://app.example.com/upload/a?page=2",
		"X-Original-Method": "GET", "X-Sent-From": "nginx-ingress-controller", "X-Real-IP": "198.51.100.7",
		"X-Forwarded-For": "198.51.100.7", "X-Request-ID": "0123456789abcdef", "X-Auth-Request-Redirect": "/upload/a?page=2",
		"X-User-Id": "carol", "X-Forwarded-Uri": "/static/spoofed",
	}},
}

func TestForwardAuthIngresses(t *testing.T) {
	for _, ing := range ingresses {
		t.Run(ing.name, func(t *testing.T) {
			flags := []string{}
			deny := 429
			if ing.name == "ingress-nginx" {
				// nginx's auth_request treats only 401 and 403 as a denial.
				flags, deny = []string{"--forward-auth-deny-status", "403"}, 403
			}
			p := start(t, policyFor(ing.original, 1), flags...)
			h := map[string]string{"X-Upload-Size": "6"}
			for k, v := range ing.headers {
				h[k] = v
			}
			resp, _ := p.forwardAuth(t, "GET", "", h)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-client";r=2;t=3600, "per-user";r=4;t=3600, "uploads";r=4;t=21600` {
				t.Fatalf("first: %d %v", resp.StatusCode, resp.Header)
			}
			// The path was read (the upload cost 6 of 10); the next upload
			// of 6 is refused with the configured status.
			resp, body := p.forwardAuth(t, "GET", "", h)
			var pb problem
			if resp.StatusCode != deny || resp.Header.Get("Retry-After") != "7200" || json.Unmarshal([]byte(body), &pb) != nil ||
				pb.Status != deny || len(pb.Violated) != 1 || pb.Violated[0] != "uploads" {
				t.Fatalf("second: %d %v %s", resp.StatusCode, resp.Header, body)
			}
			if got := p.Metric(t, `tokengate_front_door_requests_total{front_door="forward_auth",result="over_limit"}`); got != "1" {
				t.Errorf("forward_auth over_limit counted %q", got)
			}
		})
	}
}

func TestSpoofedForwardedFor(t *testing.T) {
	t.Run("ext_authz with 0 trusted hops uses the source", func(t *testing.T) {
		p := start(t, policyFor("x-forwarded", 1))
		for i := range 4 {
			r := p.check(t, checkRequest("203.0.113.20", "/", map[string]string{"x-forwarded-for": "10.0.0." + strconv.Itoa(i)}))
			if allowed := r.GetOkResponse() != nil; allowed != (i < 3) {
				t.Fatalf("request %d with a new X-Forwarded-For: allowed %v", i, allowed)
			}
		}
	})
	t.Run("forward_auth with 1 trusted hop uses the ingress's entry only", func(t *testing.T) {
		p := start(t, policyFor("x-forwarded", 1))
		for i := range 4 {
			resp, _ := p.forwardAuth(t, "GET", "", map[string]string{"X-Forwarded-For": "10.0.0." + strconv.Itoa(i) + ", 198.51.100.20"})
			if allowed := resp.StatusCode == 200; allowed != (i < 3) {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		// Another client behind the same ingress has its own bucket.
		if resp, _ := p.forwardAuth(t, "GET", "", map[string]string{"X-Forwarded-For": "198.51.100.21"}); resp.StatusCode != 200 {
			t.Fatalf("another client: %d", resp.StatusCode)
		}
	})
	t.Run("forward_auth with 0 trusted hops: every request is the ingress", func(t *testing.T) {
		p := start(t, policyFor("x-forwarded", 0))
		for i := range 4 {
			resp, _ := p.forwardAuth(t, "GET", "", map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(30+i)})
			if allowed := resp.StatusCode == 200; allowed != (i < 3) {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
	})
}

// TestSharedLimits: the three front doors decide over the same buckets when
// the policy maps them to the same rule.
func TestSharedLimits(t *testing.T) {
	p := start(t, policyFor("x-forwarded", 1))
	user := func(i int) (string, int) {
		switch i % 3 {
		case 0:
			r := p.shouldRateLimit(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "erin"}}},
			}})
			if r.OverallCode != rlsv3.RateLimitResponse_OK {
				return "ratelimit", 429
			}
			return "ratelimit", 200
		case 1:
			r := p.check(t, checkRequest("203.0.113."+strconv.Itoa(40+i), "/", map[string]string{"x-user-id": "erin"}))
			if r.GetOkResponse() == nil {
				return "ext_authz", int(r.GetDeniedResponse().GetStatus().GetCode())
			}
			return "ext_authz", 200
		}
		resp, _ := p.forwardAuth(t, "GET", "", map[string]string{"X-User-Id": "erin", "X-Forwarded-For": "198.51.100." + strconv.Itoa(40+i)})
		return "forward_auth", resp.StatusCode
	}
	for i := range 8 {
		door, code := user(i)
		if want := map[bool]int{true: 200, false: 429}[i < 5]; code != want {
			t.Fatalf("request %d of erin through %s: %d, want %d (capacity 5 shared)", i, door, code, want)
		}
	}
	for door, want := range map[string]string{"ratelimit": "2", "ext_authz": "2", "forward_auth": "1"} {
		if got := p.Metric(t, `tokengate_front_door_requests_total{front_door="`+door+`",result="ok"}`); got != want {
			t.Errorf("%s ok counted %q, want %s", door, got, want)
		}
	}
	if got := p.Metric(t, `tokengate_decisions_total{domain="edge",result="over_limit",rule="per-user"}`); got != "3" {
		t.Errorf("per-user over_limit decisions %q, want 3", got)
	}
}

func TestDebugPolicyShowsFrontDoors(t *testing.T) {
	p := start(t, policyFor("x-original", 2))
	var v struct {
		FrontDoors map[string]struct {
			TrustedProxyHops int    `json:"trusted_proxy_hops"`
			OriginalRequest  string `json:"original_request"`
			NormalizePath    bool   `json:"normalize_path"`
			Domains          map[string][]struct {
				Actions    []string `json:"actions"`
				HitsAddend string   `json:"hits_addend_header"`
			} `json:"domains"`
		} `json:"front_doors"`
	}
	_, body := p.Get(t, "/debug/policy")
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	fa := v.FrontDoors["forward_auth"]
	if fa.TrustedProxyHops != 2 || fa.OriginalRequest != "x-original" || !fa.NormalizePath || len(fa.Domains["edge"]) != 3 ||
		fa.Domains["edge"][2].Actions[1] != "path(strip_query) -> path" || fa.Domains["edge"][2].HitsAddend != "x-upload-size" {
		t.Fatalf("front doors: %+v", v.FrontDoors)
	}
	if _, ok := v.FrontDoors["ext_authz"]; !ok {
		t.Fatal("no ext_authz")
	}
}
