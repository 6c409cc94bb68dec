package envoy_test

import (
	"path/filepath"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/policy"
)

// loadBootstrap decodes one Envoy bootstrap (YAML data) and validates it.
func loadBootstrap(t *testing.T, name string, doc map[string]any) (*bootstrapv3.Bootstrap, []string) {
	t.Helper()
	b := new(bootstrapv3.Bootstrap)
	if err := decodeProto(toJSON(t, doc), b); err != nil {
		t.Fatalf("%s: not an Envoy bootstrap: %v", name, err)
	}
	types, err := validate(b)
	if err != nil {
		t.Fatalf("%s: Envoy would refuse it:\n%v", name, err)
	}
	return b, types
}

func parsePolicy(t *testing.T, name string, data []byte) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEveryBootstrap: every Envoy configuration in this directory (every
// YAML file that is not a Kubernetes resource) is a valid bootstrap.
func TestEveryBootstrap(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range files {
		docs := yamlDocs(t, f)
		if len(docs) == 1 && docs[0]["kind"] == nil {
			loadBootstrap(t, f, docs[0])
			n++
		}
	}
	if n == 0 {
		t.Fatal("no Envoy bootstrap found")
	}
}

// TestEnvoyYAML: envoy.yaml is a valid bootstrap whose descriptors fit the
// built-in policy exactly: each meets a rule and each rule is met.
func TestEnvoyYAML(t *testing.T) {
	docs := yamlDocs(t, "envoy.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	b, types := loadBootstrap(t, "envoy.yaml", docs[0])
	for _, want := range []string{
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.filters.http.ratelimit.v3.RateLimit",
		"envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation",
	} {
		if !slices.Contains(types, "type.googleapis.com/"+want) {
			t.Errorf("no %s was validated", want)
		}
	}

	filter, hcm := rateLimitFilterOf(t, b)
	switch {
	case filter.GetDomain() != "edge":
		t.Errorf("domain %q", filter.GetDomain())
	case filter.GetTimeout().AsDuration() <= 0:
		t.Error("no timeout")
	case filter.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03:
		t.Error("X-RateLimit headers are off")
	case filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tokengate":
		t.Error("the filter does not call the tokengate cluster")
	case hcm.GetPreserveExternalRequestId():
		t.Error("clients could choose their request id and replay old answers")
	}
	checkTokengateCluster(t, b, "tokengate", 8081)

	pol := parsePolicy(t, config.DefaultName, config.Default)
	ds := bootstrapDescriptors(t, b)
	checkCoverage(t, pol, "edge", checkDescriptors(t, pol, ds))
	checkRequestIDs(t, pol, ds)
	checkPathValues(t, ds)

	// The cost header rides on the per-user descriptor, and every request
	// enters with x-cost: 1, the client's own replaced, so that a request
	// keeps its per-user limit (Envoy drops a descriptor whose hits_addend
	// is missing) and a client cannot choose its cost (cost_test.go).
	if !slices.ContainsFunc(ds, func(d descriptor) bool {
		return d.cost == "%REQ(x-cost)%" && pol.Match(d.domain, d.entries).Name == "per-user"
	}) {
		t.Error("no per-user descriptor costs %REQ(x-cost)%")
	}
	if !setsHeader(t, hcm, "x-cost", "1") {
		t.Error("x-cost is not set to 1 before the filters, whatever the client sent")
	}
}

// setsHeader: an early header mutation sets the header to value, replacing
// any the client sent.
func setsHeader(t *testing.T, hcm *hcmv3.HttpConnectionManager, key, value string) bool {
	t.Helper()
	for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
		hm := unpack[*headermutationv3.HeaderMutation](t, ext.GetTypedConfig())
		for _, m := range hm.GetMutations() {
			a := m.GetAppend()
			if a.GetHeader().GetKey() == key && a.GetHeader().GetValue() == value &&
				a.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				return true
			}
		}
	}
	return false
}

// TestSidecarExample: the Envoy configuration in examples/sidecar is valid,
// calls tokengate on localhost, and fits the policy of the same example.
func TestSidecarExample(t *testing.T) {
	var envoyYAML, policyYAML string
	for _, doc := range yamlDocs(t, repoFile("examples", "sidecar", "sidecar.yaml")) {
		if doc["kind"] != "ConfigMap" {
			continue
		}
		data, _ := doc["data"].(map[string]any)
		if s, ok := data["envoy.yaml"].(string); ok {
			envoyYAML = s
		}
		if s, ok := data["policy.yaml"].(string); ok {
			policyYAML = s
		}
	}
	if envoyYAML == "" || policyYAML == "" {
		t.Fatal("the example lacks a ConfigMap with envoy.yaml or policy.yaml")
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(envoyYAML), &doc); err != nil {
		t.Fatal(err)
	}
	b, _ := loadBootstrap(t, "sidecar envoy.yaml", doc)
	checkTokengateCluster(t, b, "127.0.0.1", 8081)
	pol := parsePolicy(t, "sidecar policy.yaml", []byte(policyYAML))
	ds := bootstrapDescriptors(t, b)
	met := checkDescriptors(t, pol, ds)
	for _, d := range pol.Domains() {
		checkCoverage(t, pol, d, met)
	}
}

func rateLimitFilterOf(t *testing.T, b *bootstrapv3.Bootstrap) (*ratelimitv3.RateLimit, *hcmv3.HttpConnectionManager) {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				filters := hcm.GetHttpFilters()
				for i, hf := range filters {
					if hf.GetName() != rateLimitFilter {
						continue
					}
					if last := filters[len(filters)-1]; i == len(filters)-1 || last.GetName() != "envoy.filters.http.router" {
						t.Error("the rate limit filter must come before the router, which must be last")
					}
					return unpack[*ratelimitv3.RateLimit](t, hf.GetTypedConfig()), hcm
				}
			}
		}
	}
	t.Fatal("no rate limit filter")
	return nil, nil
}

// checkTokengateCluster: the tokengate cluster reaches host:port over
// HTTP/2, as gRPC needs.
func checkTokengateCluster(t *testing.T, b *bootstrapv3.Bootstrap, host string, port uint32) {
	t.Helper()
	i := slices.IndexFunc(b.GetStaticResources().GetClusters(), func(c *clusterv3.Cluster) bool { return c.GetName() == "tokengate" })
	if i < 0 {
		t.Fatal("no tokengate cluster")
	}
	c := b.GetStaticResources().GetClusters()[i]
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil || unpack[*upstreamhttpv3.HttpProtocolOptions](t, a).GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("the tokengate cluster does not speak HTTP/2")
	}
	sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != port {
		t.Errorf("tokengate cluster at %s:%d, want %s:%d", sa.GetAddress(), sa.GetPortValue(), host, port)
	}
}
