package envoy_test

import (
	"testing"
	"time"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3" // HttpRequestHeaderMatchInput
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/rlqs"
)

// TestRLQSExample: envoy/rlqs.yaml is a bootstrap Envoy accepts (Envoy's
// validation rules checked through every typed_config, the
// rate_limit_quota filter's bucket settings included), its filter streams
// to tokengate's gRPC port in the built-in policy's domain, reports every
// --rlqs-reporting-interval (the default), and every bucket it builds
// reaches a limited rule of that policy: the BucketIds are those of the
// bucket_id_builder, with a user's id where the request's header goes.
func TestRLQSExample(t *testing.T) {
	b, types := loadBootstrap(t, "rlqs.yaml", yamlDocs(t, "rlqs.yaml")[0])
	want := "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings"
	n := 0
	for _, ty := range types {
		if ty == want {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d bucket settings validated, want 2 (validated: %v)", n, types)
	}
	checkTokengateCluster(t, b, "tokengate", 8081)
	hcm := unpack[*hcmv3.HttpConnectionManager](t, b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	filters := hcm.GetHttpFilters()
	if len(filters) < 2 || filters[0].GetName() != "envoy.filters.http.rate_limit_quota" || filters[len(filters)-1].GetName() != "envoy.filters.http.router" {
		t.Fatal("want the rate_limit_quota filter first and the router last")
	}
	fc := unpack[*rlqsfilterv3.RateLimitQuotaFilterConfig](t, filters[0].GetTypedConfig())
	if fc.GetRlqsServer().GetEnvoyGrpc().GetClusterName() != "tokengate" || fc.GetDomain() != "edge" {
		t.Fatalf("the filter must stream to the tokengate cluster in domain edge: %v", fc)
	}

	pol := parsePolicy(t, config.DefaultName, config.Default)
	var settings []*rlqsfilterv3.RateLimitQuotaBucketSettings
	for _, m := range fc.GetBucketMatchers().GetMatcherList().GetMatchers() {
		settings = append(settings, bucketSettings(t, m.GetOnMatch()))
	}
	settings = append(settings, bucketSettings(t, fc.GetBucketMatchers().GetOnNoMatch()))
	for i, s := range settings {
		if s.GetReportingInterval().AsDuration() != time.Second {
			t.Errorf("bucket %d reports every %v, not tokengate's --rlqs-reporting-interval 1s", i, s.GetReportingInterval().AsDuration())
		}
		for name, b := range map[string]*typev3.RateLimitStrategy{
			"no_assignment_behavior":      s.GetNoAssignmentBehavior().GetFallbackRateLimit(),
			"expired_assignment_behavior": s.GetExpiredAssignmentBehavior().GetFallbackRateLimit(),
		} {
			if b.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
				t.Errorf("bucket %d: %s is not DENY_ALL, which the bound of docs/rlqs.md assumes", i, name)
			}
		}
		id := map[string]string{}
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			id[k] = v.GetStringValue()
			if v.GetCustomValue() != nil {
				id[k] = "alice"
			}
		}
		entries, assignment, err := rlqs.Explain(pol, fc.GetDomain(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r := pol.Match(fc.GetDomain(), entries); r == nil || !r.HasBucket() {
			t.Errorf("bucket %d %v reaches no limited rule: %s", i, id, assignment)
		}
	}
}

func bucketSettings(t *testing.T, m *xdsmatcherv3.Matcher_OnMatch) *rlqsfilterv3.RateLimitQuotaBucketSettings {
	t.Helper()
	return unpack[*rlqsfilterv3.RateLimitQuotaBucketSettings](t, m.GetAction().GetTypedConfig())
}
