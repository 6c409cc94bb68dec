package envoy_test

// Envoy Gateway's side of examples/ai-gateway. backendtrafficpolicy.yaml
// holds only fields of Envoy Gateway's API (BackendTrafficPolicy,
// api/v1alpha1) and Envoy AI Gateway's (AIGatewayRoute, api/v1beta1):
// each is decoded strictly into the structs below, which carry those APIs'
// JSON field names, so any other field fails. The rate limits Envoy
// Gateway makes of it meet policy.yaml's second domain.
//
// The translation relied on, from envoyproxy/gateway (at d32f2829):
// internal/gatewayapi/backendtrafficpolicy.go (buildRateLimitRule,
// translateRateLimitCost, irRuleName) and internal/xds/translator/
// ratelimit.go (buildRouteRateLimits, stripRuleIndexSuffix,
// getDomainRuleIndex), for a rule with shared: true and header selectors:
//
//   - the rule's name is <policy namespace>/<policy name>/rule/<index in
//     the policy>, its domain the name without /rule/<index>;
//   - its actions: generic_key with the rule's name as descriptor_key and
//     descriptor_value, then one per header, n counting the rule's headers
//     over all its clientSelectors from 0, i counting the shared rules
//     before it: Distinct, request_headers (descriptor_key
//     rule-<i>-match-<n>); Exact (or no type with a value),
//     header_value_match with rule-<i>-match-<n> as descriptor_key and
//     descriptor_value, expect_match true, an exact string match;
//   - cost.request is that rate limit's hits_addend (Number: the number;
//     Metadata: the format below); cost.response a second rate limit with
//     the same actions, apply_on_stream_done and hits_addend format
//     %DYNAMIC_METADATA(<namespace>:<key>)%.
//
// Anything else (methods, path, sourceCIDR, queryParams, regular
// expressions, a rule not shared, whose keys are each route's name) is
// refused here rather than guessed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// Envoy Gateway's BackendTrafficPolicy (api/v1alpha1): every field of
// the types on the way to a global rate limit rule; the spec's other
// fields are listed, their contents not checked here.
type (
	egBackendTrafficPolicy struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   kubeObjectMeta  `json:"metadata"`
		Spec       egBTPSpec       `json:"spec"`
		Status     json.RawMessage `json:"status"`
	}
	egBTPSpec struct {
		// PolicyTargetReferences
		TargetRef       *gwTargetRef    `json:"targetRef"`
		TargetRefs      []gwTargetRef   `json:"targetRefs"`
		TargetSelectors json.RawMessage `json:"targetSelectors"`
		// ClusterSettings
		LoadBalancer   json.RawMessage `json:"loadBalancer"`
		Retry          json.RawMessage `json:"retry"`
		ProxyProtocol  json.RawMessage `json:"proxyProtocol"`
		TCPKeepalive   json.RawMessage `json:"tcpKeepalive"`
		HealthCheck    json.RawMessage `json:"healthCheck"`
		CircuitBreaker json.RawMessage `json:"circuitBreaker"`
		Timeout        json.RawMessage `json:"timeout"`
		Connection     json.RawMessage `json:"connection"`
		DNS            json.RawMessage `json:"dns"`
		HTTP2          json.RawMessage `json:"http2"`
		// BackendTrafficPolicySpec's own
		MergeType         json.RawMessage  `json:"mergeType"`
		RateLimit         *egRateLimitSpec `json:"rateLimit"`
		BandwidthLimit    json.RawMessage  `json:"bandwidthLimit"`
		FaultInjection    json.RawMessage  `json:"faultInjection"`
		AdmissionControl  json.RawMessage  `json:"admissionControl"`
		UseClientProtocol json.RawMessage  `json:"useClientProtocol"`
		Compression       json.RawMessage  `json:"compression"`
		Compressor        json.RawMessage  `json:"compressor"`
		ResponseOverride  json.RawMessage  `json:"responseOverride"`
		HTTPUpgrade       json.RawMessage  `json:"httpUpgrade"`
		RequestBuffer     json.RawMessage  `json:"requestBuffer"`
		Telemetry         json.RawMessage  `json:"telemetry"`
		RoutingType       json.RawMessage  `json:"routingType"`
	}
	egRateLimitSpec struct {
		Type   string           `json:"type"` // Global, Local
		Global *egRateLimitList `json:"global"`
		Local  *egRateLimitList `json:"local"`
	}
	egRateLimitList struct {
		Rules []egRateLimitRule `json:"rules"`
	}
	egRateLimitRule struct {
		ClientSelectors   []egSelectCondition `json:"clientSelectors"`
		Limit             egRateLimitValue    `json:"limit"`
		Cost              *egRateLimitCost    `json:"cost"`
		Shared            *bool               `json:"shared"`
		ShadowMode        *bool               `json:"shadowMode"`
		XRateLimitHeaders string              `json:"xRateLimitHeaders"` // Off, DraftVersion03
	}
	egSelectCondition struct {
		Headers     []egHeaderMatch `json:"headers"`
		Methods     json.RawMessage `json:"methods"`
		Path        json.RawMessage `json:"path"`
		SourceCIDR  json.RawMessage `json:"sourceCIDR"`
		QueryParams json.RawMessage `json:"queryParams"`
	}
	egHeaderMatch struct {
		Type   string  `json:"type"` // Exact (the default), RegularExpression, Distinct
		Name   string  `json:"name"`
		Value  *string `json:"value"`
		Invert *bool   `json:"invert"`
	}
	egRateLimitValue struct {
		Requests     uint32         `json:"requests"`
		Unit         string         `json:"unit"` // Second, Minute, Hour, Day, Week, Month, Year
		FromMetadata *egMetadataKey `json:"fromMetadata"`
	}
	egRateLimitCost struct {
		Request  *egCostSpecifier `json:"request"`
		Response *egCostSpecifier `json:"response"`
	}
	egCostSpecifier struct {
		From     string         `json:"from"` // Number, Metadata
		Number   *uint64        `json:"number"`
		Metadata *egMetadataKey `json:"metadata"`
	}
	egMetadataKey struct {
		Namespace string `json:"namespace"`
		Key       string `json:"key"`
	}
)

// Envoy AI Gateway's AIGatewayRoute (api/v1beta1), with the Gateway API
// types it uses (sigs.k8s.io/gateway-api/apis/v1).
type (
	aigRoute struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   kubeObjectMeta  `json:"metadata"`
		Spec       aigRouteSpec    `json:"spec"`
		Status     json.RawMessage `json:"status"`
	}
	aigRouteSpec struct {
		ParentRefs      []gwParentRef       `json:"parentRefs"`
		Hostnames       []string            `json:"hostnames"`
		Rules           []aigRouteRule      `json:"rules"`
		LLMRequestCosts []aigLLMRequestCost `json:"llmRequestCosts"`
	}
	aigRouteRule struct {
		Name              string          `json:"name"`
		BackendRefs       []aigBackendRef `json:"backendRefs"`
		Matches           []aigRouteMatch `json:"matches"`
		Timeouts          json.RawMessage `json:"timeouts"`
		StreamIdleTimeout string          `json:"streamIdleTimeout"`
		ModelsOwnedBy     string          `json:"modelsOwnedBy"`
		ModelsCreatedAt   string          `json:"modelsCreatedAt"`
	}
	aigBackendRef struct {
		Name              string          `json:"name"`
		Namespace         string          `json:"namespace"`
		Group             string          `json:"group"`
		Kind              string          `json:"kind"`
		ModelNameOverride string          `json:"modelNameOverride"`
		HeaderMutation    json.RawMessage `json:"headerMutation"`
		BodyMutation      json.RawMessage `json:"bodyMutation"`
		Weight            *int32          `json:"weight"`
		Priority          *uint32         `json:"priority"`
	}
	aigRouteMatch struct {
		Headers []gwHeaderMatch `json:"headers"`
	}
	aigLLMRequestCost struct {
		MetadataKey string `json:"metadataKey"`
		Type        string `json:"type"` // OutputToken, InputToken, CachedInputToken, CacheCreationInputToken, TotalToken, ReasoningToken, CEL
		CEL         string `json:"cel"`
	}
	gwTargetRef struct {
		Group       string `json:"group"`
		Kind        string `json:"kind"`
		Name        string `json:"name"`
		SectionName string `json:"sectionName"`
	}
	gwParentRef struct {
		Group       string `json:"group"`
		Kind        string `json:"kind"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		SectionName string `json:"sectionName"`
		Port        *int32 `json:"port"`
	}
	gwHeaderMatch struct {
		Type  string `json:"type"` // Exact, RegularExpression
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	kubeObjectMeta struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
)

// aiGatewayDocs decodes the documents of backendtrafficpolicy.yaml (data)
// strictly into the API types.
func aiGatewayDocs(t *testing.T, data []byte) (egBackendTrafficPolicy, aigRoute, error) {
	t.Helper()
	var btp egBackendTrafficPolicy
	var route aigRoute
	for _, doc := range decodeDocs(t, "backendtrafficpolicy.yaml", data) {
		var dst any
		switch doc["kind"] {
		case "BackendTrafficPolicy":
			dst = &btp
		case "AIGatewayRoute":
			dst = &route
		default:
			return btp, route, fmt.Errorf("a %v: not checked by this test", doc["kind"])
		}
		if err := decodeStrict(toJSON(t, doc), dst); err != nil {
			return btp, route, fmt.Errorf("%v: %w", doc["kind"], err)
		}
	}
	return btp, route, nil
}

// aiGatewayResources are the documents of backendtrafficpolicy.yaml.
func aiGatewayResources(t *testing.T) (egBackendTrafficPolicy, aigRoute) {
	t.Helper()
	data, err := os.ReadFile(aiGatewayFile("backendtrafficpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	btp, route, err := aiGatewayDocs(t, data)
	if err != nil {
		t.Fatal(err)
	}
	return btp, route
}

func oneOf(t *testing.T, what, v string, allowed ...string) {
	t.Helper()
	if !slices.Contains(allowed, v) {
		t.Errorf("%s %q: not one of %q", what, v, allowed)
	}
}

// TestAIGatewayBackendTrafficPolicy: the BackendTrafficPolicy and the
// AIGatewayRoute use their APIs' fields and values only, charge nothing at
// request time and AI Gateway's token count after the response, on the
// same Gateway; Envoy Gateway's rate limits of them pair each check with
// its report and meet every rule of policy.yaml's domain for them, whose
// buckets are what tokengate makes of the rules' limits and the same as
// domain llm's (envoy.yaml's).
func TestAIGatewayBackendTrafficPolicy(t *testing.T) {
	btp, route := aiGatewayResources(t)
	if btp.APIVersion != "gateway.envoyproxy.io/v1alpha1" || route.APIVersion != "aigateway.envoyproxy.io/v1beta1" {
		t.Errorf("apiVersions %q and %q", btp.APIVersion, route.APIVersion)
	}
	costKeys := map[string]bool{}
	for _, c := range route.Spec.LLMRequestCosts {
		oneOf(t, "llmRequestCosts type", c.Type, "OutputToken", "InputToken", "CachedInputToken", "CacheCreationInputToken", "TotalToken", "ReasoningToken", "CEL")
		costKeys[c.MetadataKey] = true
	}
	gateways := func(refs []gwTargetRef) []string {
		var names []string
		for _, r := range refs {
			if r.Group == "gateway.networking.k8s.io" && r.Kind == "Gateway" {
				names = append(names, r.Name)
			}
		}
		return names
	}
	if g := gateways(btp.Spec.TargetRefs); len(g) != 1 || !slices.ContainsFunc(route.Spec.ParentRefs, func(p gwParentRef) bool { return p.Name == g[0] && p.Kind == "Gateway" }) {
		t.Errorf("the policy targets gateways %q; the AIGatewayRoute must be on it", g)
	}
	rl := btp.Spec.RateLimit
	if rl == nil || rl.Global == nil || len(rl.Global.Rules) == 0 {
		t.Fatal("no global rate limit rule")
	}
	oneOf(t, "rateLimit type", rl.Type, "Global")
	for i, r := range rl.Global.Rules {
		oneOf(t, fmt.Sprintf("rule %d unit", i), r.Limit.Unit, "Second", "Minute", "Hour", "Day", "Week", "Month", "Year")
		if c := r.Cost; c == nil || c.Request == nil || c.Request.From != "Number" || c.Request.Number == nil || *c.Request.Number != 0 {
			t.Errorf("rule %d: cost.request must be from Number 0: a check (above 0 a post-paid rule reads it as a report)", i)
		}
		if c := r.Cost; c == nil || c.Response == nil || c.Response.From != "Metadata" || c.Response.Metadata == nil ||
			c.Response.Metadata.Namespace != "io.envoy.ai_gateway" || !costKeys[c.Response.Metadata.Key] {
			t.Errorf("rule %d: cost.response must be from Metadata, in io.envoy.ai_gateway under a key of the AIGatewayRoute's llmRequestCosts", i)
		}
	}

	pol := aiGatewayPolicy(t)
	domain, limits, checks := egRateLimits(t, btp)
	checkBudgetPairs(t, pol, domain, limits)
	var ds []descriptor
	for _, l := range limits {
		ds = append(ds, descriptor{domain: domain, route: "(Envoy Gateway)", entries: entriesOf(t, l, ""), cost: costOf(l)})
	}
	checkCoverage(t, pol, domain, checkDescriptors(t, pol, ds))

	// Each rule's bucket is what tokengate makes of its limit (requests
	// per unit, that many at once), as it would from Envoy Gateway's own
	// configuration of the rate limit service.
	words := map[string]string{"Second": "s", "Minute": "m", "Hour": "h", "Day": "d"}
	for i, r := range rl.Global.Rules {
		pr := pol.Match(domain, entriesOf(t, checks[i], ""))
		want, err := bucket.ParseRate(fmt.Sprintf("%d/%s", r.Limit.Requests, words[r.Limit.Unit]))
		if err != nil {
			t.Fatalf("rule %d: %v", i, err)
		}
		if p := pr.Version.Params; p.Rate() != want || p.Capacity() != int64(r.Limit.Requests) {
			t.Errorf("rule %d: policy rule %s is %d refilled at %v, want %v and %d", i, pr.Name, p.Capacity(), p.Rate(), want, r.Limit.Requests)
		}
		// envoy.yaml's budgets are the same, rule for rule.
		if own := pol.Rule("llm", pr.Name); own == nil || own.Version.Params != pr.Version.Params {
			t.Errorf("rule %s: domain llm has no rule of that name with the same parameters", pr.Name)
		}
	}
}

// TestAIGatewayAPIFieldsRefuseOthers: a field outside the APIs, at any
// depth, fails the decode that TestAIGatewayBackendTrafficPolicy relies on.
func TestAIGatewayAPIFieldsRefuseOthers(t *testing.T) {
	data, err := os.ReadFile(aiGatewayFile("backendtrafficpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"- clientSelectors:", "- clientSelector:", `unknown field "clientSelector"`},
		{"          shared: true # one", "          share: true # one", `unknown field "share"`},
		{"                key: llm_total_token", "                keys: llm_total_token", `unknown field "keys"`},
		{"  llmRequestCosts:", "  llmRequestCost:", `unknown field "llmRequestCost"`},
	} {
		if !bytes.Contains(data, []byte(c.old)) {
			t.Fatalf("backendtrafficpolicy.yaml has no %q", c.old)
		}
		_, _, err := aiGatewayDocs(t, bytes.Replace(data, []byte(c.old), []byte(c.new), 1))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("with %q: %v, want an error saying %s", c.new, err, c.want)
		}
	}
}

// egRateLimits is Envoy Gateway's translation of the policy's rules into
// a route's rate limits (see the top of this file), their domain, and
// each rule's request-time rate limit.
func egRateLimits(t *testing.T, btp egBackendTrafficPolicy) (domain string, limits, checks []*routev3.RateLimit) {
	t.Helper()
	shared := 0
	for idx, r := range btp.Spec.RateLimit.Global.Rules {
		if r.Shared == nil || !*r.Shared {
			t.Fatalf("rule %d is not shared: its descriptors would be each route's; not translated by this test", idx)
		}
		name := fmt.Sprintf("%s/%s/rule/%d", btp.Metadata.Namespace, btp.Metadata.Name, idx)
		d := strings.TrimSuffix(name, fmt.Sprintf("/rule/%d", idx))
		if domain != "" && d != domain {
			t.Fatalf("rules in domains %q and %q", domain, d)
		}
		domain = d
		actions := []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
			GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: name, DescriptorValue: name}}}}
		n := 0
		for _, sel := range r.ClientSelectors {
			if sel.Methods != nil || sel.Path != nil || sel.SourceCIDR != nil || sel.QueryParams != nil {
				t.Fatalf("rule %d: selectors other than headers are not translated by this test", idx)
			}
			for _, h := range sel.Headers {
				actions = append(actions, egHeaderAction(t, fmt.Sprintf("rule-%d-match-%d", shared, n), h))
				n++
			}
		}
		if n == 0 {
			t.Fatalf("rule %d: no header selector; not translated by this test", idx)
		}
		shared++
		check := &routev3.RateLimit{Actions: actions}
		if r.Cost != nil && r.Cost.Request != nil {
			check.HitsAddend = egHitsAddend(r.Cost.Request)
		}
		limits, checks = append(limits, check), append(checks, check)
		if r.Cost != nil && r.Cost.Response != nil {
			limits = append(limits, &routev3.RateLimit{Actions: actions, ApplyOnStreamDone: true, HitsAddend: egHitsAddend(r.Cost.Response)})
		}
	}
	return domain, limits, checks
}

func egHeaderAction(t *testing.T, key string, h egHeaderMatch) *routev3.RateLimit_Action {
	t.Helper()
	switch {
	case h.Type == "Distinct" && h.Value == nil && h.Invert == nil:
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
			RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: h.Name, DescriptorKey: key}}}
	case (h.Type == "Exact" || h.Type == "") && h.Value != nil && h.Invert == nil:
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_HeaderValueMatch_{
			HeaderValueMatch: &routev3.RateLimit_Action_HeaderValueMatch{
				DescriptorKey: key, DescriptorValue: key, ExpectMatch: wrapperspb.Bool(true),
				Headers: []*routev3.HeaderMatcher{{Name: h.Name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
					StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: *h.Value}}}}},
			}}}
	}
	t.Fatalf("header %s (%s): not translated by this test", h.Name, h.Type)
	return nil
}

func egHitsAddend(c *egCostSpecifier) *routev3.RateLimit_HitsAddend {
	h := &routev3.RateLimit_HitsAddend{}
	if c.Number != nil {
		h.Number = wrapperspb.UInt64(*c.Number)
	}
	if c.Metadata != nil {
		h.Format = fmt.Sprintf("%%DYNAMIC_METADATA(%s:%s)%%", c.Metadata.Namespace, c.Metadata.Key)
	}
	return h
}
