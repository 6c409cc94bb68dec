package envoy_test

import (
	"os"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

// TestEnvoyExtAuthzExample: envoy/ext_authz.yaml is a bootstrap Envoy
// accepts (decoded into go-control-plane's protos, unknown fields refused,
// Envoy's validation rules checked through every typed_config), its
// ext_authz filter calls tokengate's gRPC port over HTTP/2, sends every
// header the ext_authz front door of config/examples/front-doors.yaml
// reads, and names only domains that front door serves.
func TestEnvoyExtAuthzExample(t *testing.T) {
	b := new(bootstrapv3.Bootstrap)
	if err := decodeProto(toJSON(t, yamlDocs(t, repoFile("envoy", "ext_authz.yaml"))[0]), b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	types, err := validate(b)
	if err != nil {
		t.Fatalf("Envoy would refuse it:\n%v", err)
	}
	for _, want := range []string{"ext_authz.v3.ExtAuthz", "ext_authz.v3.ExtAuthzPerRoute", "router.v3.Router", "http_connection_manager.v3.HttpConnectionManager"} {
		if !slices.Contains(types, "type.googleapis.com/envoy.extensions.filters."+map[bool]string{true: "network.", false: "http."}[want[0] == 'h']+want) {
			t.Errorf("no %s was validated (validated: %v)", want, types)
		}
	}

	pdata, err := os.ReadFile(repoFile("config", "examples", "front-doors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("front-doors.yaml", pdata)
	if err != nil {
		t.Fatal(err)
	}
	fd := pol.FrontDoor(spec.ExtAuthz)

	var tokengate bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != "tokengate" {
			continue
		}
		opts := unpack[*upstreamhttpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		tokengate = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil && sa.GetPortValue() == 8081
	}
	if !tokengate {
		t.Error("no tokengate cluster speaking HTTP/2 to port 8081")
	}
	hcm := unpack[*hcmv3.HttpConnectionManager](t, b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	filters := hcm.GetHttpFilters()
	if len(filters) < 2 || filters[0].GetName() != "envoy.filters.http.ext_authz" || filters[len(filters)-1].GetName() != "envoy.filters.http.router" {
		t.Fatal("want the ext_authz filter first and the router last")
	}
	ea := unpack[*extauthzv3.ExtAuthz](t, filters[0].GetTypedConfig())
	if ea.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tokengate" || ea.GetGrpcService().GetTimeout().AsDuration() <= 0 || ea.GetFailureModeAllow() {
		t.Error("the filter must call the tokengate cluster with a timeout and fail closed")
	}
	sent := func(h string) bool {
		return ea.GetAllowedHeaders() == nil || slices.ContainsFunc(ea.GetAllowedHeaders().GetPatterns(), func(p *matcherv3.StringMatcher) bool { return p.GetExact() == h })
	}
	for _, domain := range fd.Domains() {
		for _, d := range fd.Domain(domain).Descriptors {
			for _, a := range d.Actions {
				if a.Kind == spec.ActionRequestHeader && !sent(a.Header) {
					t.Errorf("the policy reads %s, which Envoy does not send", a.Header)
				}
			}
			if d.HitsAddendHeader != "" && !sent(d.HitsAddendHeader) {
				t.Errorf("the policy reads the cost from %s, which Envoy does not send", d.HitsAddendHeader)
			}
		}
	}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			domain := ""
			if a := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"]; a != nil {
				per := unpack[*extauthzv3.ExtAuthzPerRoute](t, a)
				if per.GetDisabled() {
					continue
				}
				domain = per.GetCheckSettings().GetContextExtensions()["domain"]
			}
			if fd.Domain(domain) == nil {
				t.Errorf("route %v: the ext_authz front door serves no domain %q", r.GetMatch(), domain)
			}
		}
	}
}
