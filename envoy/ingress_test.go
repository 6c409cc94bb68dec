package envoy_test

// The ingress examples: each resource is decoded strictly into a struct
// that mirrors the fields of its custom resource used here (Istio
// EnvoyFilter, Contour ExtensionService and HTTPProxy, Emissary
// RateLimitService and Mapping), and the descriptors they make Envoy send
// are derived and matched against the built-in policy.

import (
	"encoding/json"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/policy"
)

type objectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type envoyFilter struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		WorkloadSelector struct {
			Labels map[string]string `json:"labels"`
		} `json:"workloadSelector"`
		ConfigPatches []struct {
			ApplyTo string `json:"applyTo"`
			Match   struct {
				Context  string `json:"context"`
				Listener *struct {
					FilterChain struct {
						Filter struct {
							Name      string `json:"name"`
							SubFilter struct {
								Name string `json:"name"`
							} `json:"subFilter"`
						} `json:"filter"`
					} `json:"filterChain"`
				} `json:"listener"`
				RouteConfiguration *struct {
					Vhost struct {
						Name  string `json:"name"`
						Route struct {
							Action string `json:"action"`
						} `json:"route"`
					} `json:"vhost"`
				} `json:"routeConfiguration"`
			} `json:"match"`
			Patch struct {
				Operation string          `json:"operation"`
				Value     json.RawMessage `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

// TestIstio: each patch value is the Envoy type its applyTo names, valid
// by Envoy's rules (a MERGE into a virtual host is checked merged into a
// minimal one), and the descriptors it adds meet rules of the policy.
func TestIstio(t *testing.T) {
	pol := parsePolicy(t, config.DefaultName, config.Default)
	for _, doc := range yamlDocs(t, "istio.yaml") {
		var ef envoyFilter
		if err := decodeStrict(toJSON(t, doc), &ef); err != nil {
			t.Fatalf("EnvoyFilter: %v", err)
		}
		if ef.APIVersion != "networking.istio.io/v1alpha3" || ef.Kind != "EnvoyFilter" {
			t.Fatalf("%s %s", ef.APIVersion, ef.Kind)
		}
		var filter *ratelimitv3.RateLimit
		var vhost *routev3.VirtualHost
		for i, p := range ef.Spec.ConfigPatches {
			if !slices.Contains([]string{"GATEWAY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "ANY"}, p.Match.Context) {
				t.Errorf("patch %d: context %q", i, p.Match.Context)
			}
			var m proto.Message
			switch p.ApplyTo {
			case "HTTP_FILTER":
				if p.Match.Listener == nil || p.Patch.Operation != "INSERT_BEFORE" ||
					p.Match.Listener.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
					t.Errorf("patch %d: the filter must go before the router", i)
				}
				m = new(hcmv3.HttpFilter)
			case "VIRTUAL_HOST":
				if p.Match.RouteConfiguration == nil || p.Patch.Operation != "MERGE" {
					t.Errorf("patch %d: want a MERGE into the gateway's virtual hosts", i)
				}
				// Istio merges the value into each virtual host, which has
				// a name and domains of its own.
				m = &routev3.VirtualHost{Name: "gateway", Domains: []string{"*"}}
			case "CLUSTER":
				m = new(clusterv3.Cluster)
			default:
				t.Fatalf("patch %d: applyTo %s is not checked by this test", i, p.ApplyTo)
			}
			if err := decodeMerge(p.Patch.Value, m); err != nil {
				t.Fatalf("patch %d (%s): %v", i, p.ApplyTo, err)
			}
			if _, err := validate(m); err != nil {
				t.Fatalf("patch %d (%s): Envoy would refuse it:\n%v", i, p.ApplyTo, err)
			}
			switch m := m.(type) {
			case *hcmv3.HttpFilter:
				filter = unpack[*ratelimitv3.RateLimit](t, m.GetTypedConfig())
			case *routev3.VirtualHost:
				vhost = m
			}
		}
		if filter == nil || vhost == nil {
			t.Fatal("want a rate limit filter and a virtual host's rate_limits")
		}
		ds := virtualHostDescriptors(t, filter, &routev3.VirtualHost{
			RateLimits: vhost.GetRateLimits(),
			Routes:     []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}},
		})
		checkDescriptors(t, pol, ds)
	}
}

// decodeMerge decodes JSON over the fields m already has, as a merge.
func decodeMerge(js []byte, m proto.Message) error {
	patch := m.ProtoReflect().New().Interface()
	if err := decodeProto(js, patch); err != nil {
		return err
	}
	proto.Merge(m, patch)
	return nil
}

type contourEntry struct {
	GenericKey *struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"genericKey"`
	RequestHeader *struct {
		HeaderName    string `json:"headerName"`
		DescriptorKey string `json:"descriptorKey"`
	} `json:"requestHeader"`
	RemoteAddress *struct{} `json:"remoteAddress"`
}

type contourRateLimitPolicy struct {
	Global struct {
		Descriptors []struct {
			Entries []contourEntry `json:"entries"`
		} `json:"descriptors"`
	} `json:"global"`
}

type contourResource struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		// ExtensionService
		Protocol string `json:"protocol"`
		Services []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"services"`
		TimeoutPolicy struct {
			Response string `json:"response"`
		} `json:"timeoutPolicy"`
		// HTTPProxy
		VirtualHost struct {
			Fqdn string `json:"fqdn"`
		} `json:"virtualhost"`
		Routes []struct {
			Conditions []struct {
				Prefix string `json:"prefix"`
			} `json:"conditions"`
			Services []struct {
				Name string `json:"name"`
				Port int    `json:"port"`
			} `json:"services"`
			RateLimitPolicy *contourRateLimitPolicy `json:"rateLimitPolicy"`
		} `json:"routes"`
	} `json:"spec"`
}

// TestContour: the ExtensionService reaches tokengate over h2c, and every
// descriptor of the HTTPProxy meets a rule of the policy.
func TestContour(t *testing.T) {
	pol := parsePolicy(t, config.DefaultName, config.Default)
	var ds []descriptor
	for _, doc := range yamlDocs(t, "contour.yaml") {
		var r contourResource
		if err := decodeStrict(toJSON(t, doc), &r); err != nil {
			t.Fatalf("%v: %v", doc["kind"], err)
		}
		switch r.APIVersion + " " + r.Kind {
		case "projectcontour.io/v1alpha1 ExtensionService":
			if r.Spec.Protocol != "h2c" || len(r.Spec.Services) != 1 || r.Spec.Services[0].Port != 8081 {
				t.Errorf("ExtensionService %+v: want h2c to port 8081", r.Spec)
			}
		case "projectcontour.io/v1 HTTPProxy":
			for _, route := range r.Spec.Routes {
				prefix := route.Conditions[0].Prefix
				if route.RateLimitPolicy == nil {
					t.Errorf("route %s has no rate limit policy", prefix)
					continue
				}
				for _, d := range route.RateLimitPolicy.Global.Descriptors {
					var es []policy.Entry
					for _, e := range d.Entries {
						switch {
						case e.RemoteAddress != nil:
							es = append(es, policy.Entry{Key: "remote_address", Value: "203.0.113.7"})
						case e.RequestHeader != nil:
							es = append(es, policy.Entry{Key: e.RequestHeader.DescriptorKey, Value: sampleHeader(e.RequestHeader.HeaderName)})
						case e.GenericKey != nil:
							es = append(es, policy.Entry{Key: orDefault(e.GenericKey.Key, "generic_key"), Value: e.GenericKey.Value})
						default:
							t.Fatalf("route %s: an entry of no known kind", prefix)
						}
					}
					// The domain is the one in Contour's configuration (the
					// comment at the top of contour.yaml).
					ds = append(ds, descriptor{domain: "edge", route: prefix, entries: es})
				}
			}
		default:
			t.Fatalf("unexpected %s %s", r.APIVersion, r.Kind)
		}
	}
	checkDescriptors(t, pol, ds)
	checkPathValues(t, ds)
}

type emissaryLabel struct {
	RemoteAddress *struct {
		Key string `json:"key"`
	} `json:"remote_address"`
	RequestHeaders *struct {
		Key        string `json:"key"`
		HeaderName string `json:"header_name"`
	} `json:"request_headers"`
	GenericKey *struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"generic_key"`
}

type emissaryResource struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		// RateLimitService
		Service         string `json:"service"`
		ProtocolVersion string `json:"protocol_version"`
		Domain          string `json:"domain"`
		TimeoutMS       int    `json:"timeout_ms"`
		FailureModeDeny bool   `json:"failure_mode_deny"`
		// Mapping
		Hostname string                                  `json:"hostname"`
		Prefix   string                                  `json:"prefix"`
		Rewrite  *string                                 `json:"rewrite"`
		Labels   map[string][]map[string][]emissaryLabel `json:"labels"`
	} `json:"spec"`
}

// TestEmissary: the RateLimitService speaks v3 to tokengate's gRPC port,
// the Mappings label in its domain, and every label group meets a rule.
func TestEmissary(t *testing.T) {
	pol := parsePolicy(t, config.DefaultName, config.Default)
	var rls emissaryResource
	var mappings []emissaryResource
	for _, doc := range yamlDocs(t, "emissary.yaml") {
		var r emissaryResource
		if err := decodeStrict(toJSON(t, doc), &r); err != nil {
			t.Fatalf("%v: %v", doc["kind"], err)
		}
		switch r.APIVersion + " " + r.Kind {
		case "getambassador.io/v3alpha1 RateLimitService":
			rls = r
		case "getambassador.io/v3alpha1 Mapping":
			mappings = append(mappings, r)
		default:
			t.Fatalf("unexpected %s %s", r.APIVersion, r.Kind)
		}
	}
	if rls.Spec.ProtocolVersion != "v3" || rls.Spec.Domain == "" || rls.Spec.Service != "tokengate.ratelimit:8081" {
		t.Fatalf("RateLimitService %+v", rls.Spec)
	}
	var ds []descriptor
	for _, m := range mappings {
		if len(m.Spec.Labels) != 1 || m.Spec.Labels[rls.Spec.Domain] == nil {
			t.Errorf("Mapping %s labels no domain but %q", m.Metadata.Name, rls.Spec.Domain)
		}
		for _, group := range m.Spec.Labels[rls.Spec.Domain] {
			if len(group) != 1 {
				t.Fatalf("Mapping %s: a label group has %d names", m.Metadata.Name, len(group))
			}
			for _, labels := range group {
				var es []policy.Entry
				for _, l := range labels {
					switch {
					case l.RemoteAddress != nil:
						if l.RemoteAddress.Key != "remote_address" {
							t.Errorf("Mapping %s: remote_address key %q (Emissary allows only remote_address)", m.Metadata.Name, l.RemoteAddress.Key)
						}
						es = append(es, policy.Entry{Key: "remote_address", Value: "203.0.113.7"})
					case l.RequestHeaders != nil:
						es = append(es, policy.Entry{Key: l.RequestHeaders.Key, Value: sampleHeader(l.RequestHeaders.HeaderName)})
					case l.GenericKey != nil:
						es = append(es, policy.Entry{Key: orDefault(l.GenericKey.Key, "generic_key"), Value: l.GenericKey.Value})
					default:
						t.Fatalf("Mapping %s: a label of no known kind", m.Metadata.Name)
					}
				}
				ds = append(ds, descriptor{domain: rls.Spec.Domain, route: m.Spec.Prefix, entries: es})
			}
		}
	}
	checkDescriptors(t, pol, ds)
	checkPathValues(t, ds)
}
