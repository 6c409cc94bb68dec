package envoy_test

// What Envoy sends tokengate: the descriptors a configuration's rate_limits
// actions produce, with representative values, checked against a policy.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/tokengate/tokengate/pkg/policy"
)

const rateLimitFilter = "envoy.filters.http.ratelimit"

// descriptor is one descriptor Envoy would send for requests on a route.
type descriptor struct {
	domain  string
	route   string // the route's path match, for messages and checks
	entries []policy.Entry
	cost    string // the hits_addend format or number, "" for none
}

func (d descriptor) String() string {
	kv := make([]string, len(d.entries))
	for i, e := range d.entries {
		kv[i] = e.Key + "=" + e.Value
	}
	return fmt.Sprintf("route %s: domain %q (%s)", d.route, d.domain, strings.Join(kv, ", "))
}

// sampleHeader is a representative value of a request header.
func sampleHeader(name string) string {
	switch strings.ToLower(name) {
	case "x-user-id":
		return "alice"
	case "x-request-id":
		return "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	case ":path":
		return "/api/items?page=2"
	}
	return "value-of-" + name
}

// entriesOf is what a RateLimit's actions append to a descriptor, in order,
// for a request that has every header they read.
func entriesOf(t *testing.T, rl *routev3.RateLimit, cluster string) []policy.Entry {
	t.Helper()
	var es []policy.Entry
	for _, a := range rl.GetActions() {
		var e policy.Entry
		switch {
		case a.GetRemoteAddress() != nil:
			e = policy.Entry{Key: "remote_address", Value: "203.0.113.7"}
		case a.GetMaskedRemoteAddress() != nil:
			e = policy.Entry{Key: "masked_remote_address", Value: "203.0.113.0/24"}
		case a.GetRequestHeaders() != nil:
			h := a.GetRequestHeaders()
			e = policy.Entry{Key: h.GetDescriptorKey(), Value: sampleHeader(h.GetHeaderName())}
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			e = policy.Entry{Key: orDefault(g.GetDescriptorKey(), "generic_key"), Value: g.GetDescriptorValue()}
		case a.GetHeaderValueMatch() != nil:
			h := a.GetHeaderValueMatch()
			e = policy.Entry{Key: orDefault(h.GetDescriptorKey(), "header_match"), Value: h.GetDescriptorValue()}
		case a.GetSourceCluster() != nil:
			e = policy.Entry{Key: "source_cluster", Value: "edge"}
		case a.GetDestinationCluster() != nil:
			e = policy.Entry{Key: "destination_cluster", Value: cluster}
		default:
			t.Fatalf("rate limit action %v: not understood by this test", a)
		}
		es = append(es, e)
	}
	return es
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func costOf(rl *routev3.RateLimit) string {
	h := rl.GetHitsAddend()
	switch {
	case h.GetFormat() != "":
		return h.GetFormat()
	case h.GetNumber() != nil:
		return fmt.Sprint(h.GetNumber().GetValue())
	}
	return ""
}

// bootstrapDescriptors derives the descriptors of every route of every
// HTTP connection manager in a bootstrap. Where a route takes its rate
// limits from follows Envoy: the rate limit filter's per-route config
// (RateLimitPerRoute.rate_limits) wins, then the filter's own rate_limits,
// then the route's, then, for a route without any, the virtual host's.
func bootstrapDescriptors(t *testing.T, b *bootstrapv3.Bootstrap) []descriptor {
	t.Helper()
	var out []descriptor
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
					continue
				}
				hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				var filter *ratelimitv3.RateLimit
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetName() == rateLimitFilter {
						filter = unpack[*ratelimitv3.RateLimit](t, hf.GetTypedConfig())
					}
				}
				if filter == nil {
					continue
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					out = append(out, virtualHostDescriptors(t, filter, vh)...)
				}
			}
		}
	}
	return out
}

func virtualHostDescriptors(t *testing.T, filter *ratelimitv3.RateLimit, vh *routev3.VirtualHost) []descriptor {
	t.Helper()
	var out []descriptor
	for _, r := range vh.GetRoutes() {
		domain, limits := filter.GetDomain(), filter.GetRateLimits()
		if a := r.GetTypedPerFilterConfig()[rateLimitFilter]; a != nil {
			per := unpack[*ratelimitv3.RateLimitPerRoute](t, a)
			domain = orDefault(per.GetDomain(), domain)
			if len(per.GetRateLimits()) > 0 {
				limits = per.GetRateLimits()
			}
		}
		if len(limits) == 0 {
			limits = r.GetRoute().GetRateLimits()
		}
		if len(limits) == 0 {
			limits = vh.GetRateLimits()
		}
		route := r.GetMatch().GetPath() + r.GetMatch().GetPrefix()
		for _, rl := range limits {
			out = append(out, descriptor{
				domain: domain, route: route, cost: costOf(rl),
				entries: entriesOf(t, rl, r.GetRoute().GetCluster()),
			})
		}
	}
	return out
}

// checkDescriptors: every descriptor meets a rule of the policy (or is the
// policy's request-id descriptor); nothing Envoy sends is dead weight.
// It returns the names of the rules met.
func checkDescriptors(t *testing.T, pol *policy.Policy, ds []descriptor) map[string]bool {
	t.Helper()
	if len(ds) == 0 {
		t.Fatal("no descriptors")
	}
	met := map[string]bool{}
	for _, d := range ds {
		if !slices.Contains(pol.Domains(), d.domain) {
			t.Errorf("%v: the policy has no domain %q", d, d.domain)
			continue
		}
		if len(d.entries) == 1 && d.entries[0].Key == pol.RequestIDKey() {
			if d.cost != "" {
				t.Errorf("%v: the request-id descriptor has a cost", d)
			}
			continue
		}
		r := pol.Match(d.domain, d.entries)
		if r == nil {
			t.Errorf("%v meets no rule: tokengate would never limit it", d)
			continue
		}
		if r.Unlimited && d.cost != "" {
			t.Errorf("%v: a cost on an unlimited rule", d)
		}
		met[r.Name] = true
	}
	return met
}

// checkCoverage: every rule of the domain is met by some descriptor.
func checkCoverage(t *testing.T, pol *policy.Policy, domain string, met map[string]bool) {
	t.Helper()
	for _, r := range pol.Rules(domain) {
		if !met[r.Name] {
			t.Errorf("rule %s/%s is never met by any descriptor Envoy sends", domain, r.Name)
		}
	}
}

// checkRequestIDs: every route that sends a limited descriptor also sends
// the request id, so that a retried call is not charged twice.
func checkRequestIDs(t *testing.T, pol *policy.Policy, ds []descriptor) {
	t.Helper()
	limited, withID := map[string]bool{}, map[string]bool{}
	for _, d := range ds {
		if len(d.entries) == 1 && d.entries[0].Key == pol.RequestIDKey() {
			withID[d.route] = true
		} else if r := pol.Match(d.domain, d.entries); r != nil && !r.Unlimited {
			limited[d.route] = true
		}
	}
	for route := range limited {
		if !withID[route] {
			t.Errorf("route %s sends no request id descriptor", route)
		}
	}
}

// checkPathValues: a constant path entry describes its route truthfully:
// every request on the route has a path that starts with it.
func checkPathValues(t *testing.T, ds []descriptor) {
	t.Helper()
	for _, d := range ds {
		for _, e := range d.entries {
			if e.Key == "path" && e.Value != sampleHeader(":path") && !strings.HasPrefix(d.route, e.Value) {
				t.Errorf("%v: path %q does not describe the route's requests", d, e.Value)
			}
		}
	}
}
