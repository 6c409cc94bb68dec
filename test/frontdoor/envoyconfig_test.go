package frontdoor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tokengate/tokengate/pkg/policy"
)

// TestEnvoyExtAuthzExample: envoy/ext_authz.yaml is a bootstrap Envoy
// accepts (decoded into go-control-plane's protos, unknown fields refused,
// Envoy's validation rules checked through every typed_config), its
// ext_authz filter calls tokengate's gRPC port over HTTP/2, sends every
// header the ext_authz front door of config/examples/front-doors.yaml
// reads, and names only domains that front door serves.
func TestEnvoyExtAuthzExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "envoy", "ext_authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	b := new(bootstrapv3.Bootstrap)
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	types, err := validateAll(b)
	if err != nil {
		t.Fatalf("Envoy would refuse it:\n%v", err)
	}
	for _, want := range []string{"ext_authz.v3.ExtAuthz", "ext_authz.v3.ExtAuthzPerRoute", "router.v3.Router", "http_connection_manager.v3.HttpConnectionManager"} {
		if !slices.Contains(types, "type.googleapis.com/envoy.extensions.filters."+map[bool]string{true: "network.", false: "http."}[want[0] == 'h']+want) {
			t.Errorf("no %s was validated (validated: %v)", want, types)
		}
	}

	pdata, err := os.ReadFile(filepath.Join("..", "..", "config", "examples", "front-doors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("front-doors.yaml", pdata)
	if err != nil {
		t.Fatal(err)
	}
	fd := pol.FrontDoor(policy.FrontDoorExtAuthz)

	var tokengate bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != "tokengate" {
			continue
		}
		opts := unpackAny[*upstreamhttpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		tokengate = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil && sa.GetPortValue() == 8081
	}
	if !tokengate {
		t.Error("no tokengate cluster speaking HTTP/2 to port 8081")
	}
	hcm := unpackAny[*hcmv3.HttpConnectionManager](t, b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	filters := hcm.GetHttpFilters()
	if len(filters) < 2 || filters[0].GetName() != "envoy.filters.http.ext_authz" || filters[len(filters)-1].GetName() != "envoy.filters.http.router" {
		t.Fatal("want the ext_authz filter first and the router last")
	}
	ea := unpackAny[*extauthzv3.ExtAuthz](t, filters[0].GetTypedConfig())
	if ea.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tokengate" || ea.GetGrpcService().GetTimeout().AsDuration() <= 0 || ea.GetFailureModeAllow() {
		t.Error("the filter must call the tokengate cluster with a timeout and fail closed")
	}
	sent := func(h string) bool {
		return ea.GetAllowedHeaders() == nil || slices.ContainsFunc(ea.GetAllowedHeaders().GetPatterns(), func(p *matcherv3.StringMatcher) bool { return p.GetExact() == h })
	}
	for _, domain := range fd.Domains() {
		for _, d := range fd.Domain(domain).Descriptors {
			for _, a := range d.Actions {
				if a.Kind == policy.ActionRequestHeader && !sent(a.Header) {
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
				per := unpackAny[*extauthzv3.ExtAuthzPerRoute](t, a)
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

func unpackAny[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("%s is not a %T", a.GetTypeUrl(), v)
	}
	return v
}

// validateAll runs Envoy's protoc-gen-validate rules on m and on the
// message inside every Any, at any depth (the rules stop at an Any), and
// returns the type URL of every Any it opened.
func validateAll(m proto.Message) ([]string, error) {
	var errs []error
	var types []string
	var visit func(path string, m protoreflect.Message)
	visit = func(path string, m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				return
			}
			types = append(types, a.GetTypeUrl())
			m = inner.ProtoReflect()
			path += "(" + a.GetTypeUrl() + ")"
		}
		if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p := path + "." + string(fd.Name())
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					visit(fmt.Sprintf("%s[%d]", p, i), v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(fmt.Sprintf("%s[%s]", p, k.String()), mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				visit(p, v.Message())
			}
			return true
		})
	}
	visit("bootstrap", m.ProtoReflect())
	return types, errors.Join(errs...)
}
