package spec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

const testPolicy = `request_id_key: request_id
domains:
  edge:
    - name: per-client
      match: [{key: remote_address}]
      capacity: 5
      refill: 1/s
    - name: per-user-path
      match: [{key: user_id}, {key: path, value: /api/*}]
      capacity: 10
      refill: 1/s
    - name: uploads
      match: [{key: generic_key, value: uploads}, {key: method}]
      capacity: 100
      refill: 10/s
  other:
    - name: per-host
      match: [{key: host}]
      capacity: 1
      refill: 1/s
front_doors:
  ext_authz:
    default_domain: edge
    domains:
      edge:
        - actions:
            - remote_address: {}
        - actions:
            - request_headers: {header_name: X-User-ID, descriptor_key: user_id}
            - path: {strip_query: true}
        - actions:
            - generic_key: {descriptor_value: uploads}
            - method:
          hits_addend: {request_header: x-cost}
        - actions:
            - request_headers: {header_name: x-request-id, descriptor_key: request_id}
  forward_auth:
    trusted_proxy_hops: 1
    original_request: x-original
    domains:
      edge:
        - actions: [{remote_address: {}}]
      other:
        - actions: [{host: {}}]
`

type headers map[string]string

func (h headers) Header(name string) (string, bool) { v, ok := h[name]; return v, ok }

func TestParse(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings()) != 0 {
		t.Fatalf("warnings: %v", p.Warnings())
	}
	ea := p.FrontDoor(spec.ExtAuthz)
	if ea == nil || ea.TrustedProxyHops != 0 || ea.OriginalRequest != spec.OriginalUnset || ea.Domain("") == nil {
		t.Fatalf("ext_authz: %+v", ea)
	}
	d := ea.Domain("edge").Descriptors
	if len(d) != 4 || d[1].Actions[0].Header != "x-user-id" || d[1].Actions[0].Key != "user_id" ||
		d[1].Actions[1].Key != "path" || !d[1].Actions[1].StripQuery || d[2].HitsAddendHeader != "x-cost" || d[2].Actions[1].Kind != spec.ActionMethod {
		t.Fatalf("ext_authz descriptors: %+v %+v %+v", d[1], d[1].Actions, d[2])
	}
	fa := p.FrontDoor(spec.ForwardAuth)
	if fa.TrustedProxyHops != 1 || fa.OriginalRequest != spec.OriginalXOriginal || fa.Domain("") != nil || fa.Domain("other") == nil {
		t.Fatalf("forward_auth: %+v", fa)
	}
	if got := len(p.FrontDoors()); got != 2 {
		t.Fatalf("%d front doors", got)
	}
	if !ea.NormalizePath || !fa.NormalizePath {
		t.Fatal("normalize_path is not on by default")
	}
}

func TestParseNormalizePath(t *testing.T) {
	src := strings.Replace(testPolicy, "    trusted_proxy_hops: 1\n", "    trusted_proxy_hops: 1\n    normalize_path: false\n", 1)
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if p.FrontDoor(spec.ForwardAuth).NormalizePath || !p.FrontDoor(spec.ExtAuthz).NormalizePath {
		t.Error("normalize_path: false not read, or read for the wrong door")
	}
	_, err = policy.Parse("p.yaml", []byte(strings.Replace(src, "normalize_path: false", "normalize_path: sometimes", 1)))
	if want := `p.yaml:39: front_doors.forward_auth.normalize_path: want true or false, got "sometimes"`; err == nil || err.Error() != want {
		t.Errorf("want %q, got %v", want, err)
	}
}

func TestParsePathOptions(t *testing.T) {
	src := strings.Replace(testPolicy, "- path: {strip_query: true}", "- path: {strip_query: true, strip_trailing_slash: true, lowercase: true}", 1)
	src = strings.Replace(src, "- actions: [{host: {}}]", "- actions: [{host: {lowercase: true}}]", 1)
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	path := p.FrontDoor(spec.ExtAuthz).Domain("edge").Descriptors[1].Actions[1]
	if !path.StripQuery || !path.StripTrailingSlash || !path.Lowercase || path.String() != "path(strip_query, strip_trailing_slash, lowercase) -> path" {
		t.Errorf("path action %s", path.String())
	}
	host := p.FrontDoor(spec.ForwardAuth).Domain("other").Descriptors[0].Actions[0]
	if !host.Lowercase || host.String() != "host(lowercase) -> host" {
		t.Errorf("host action %s", host.String())
	}
	_, err = policy.Parse("p.yaml", []byte(strings.Replace(src, "lowercase: true}}]", "lowercase: 1}}]", 1)))
	if want := `p.yaml:44: front_doors.forward_auth.domains.other[1].actions[1].host.lowercase: want true or false, got "1"`; err == nil || err.Error() != want {
		t.Errorf("want %q, got %v", want, err)
	}
}

func TestBuild(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	d := p.FrontDoor(spec.ExtAuthz).Domain("edge").Descriptors
	a := &spec.Attributes{RemoteAddress: "10.0.0.1", Method: "POST", Path: "/api/x?q=1", Headers: headers{"x-user-id": "alice", "x-cost": " 7 "}}
	for _, c := range []struct {
		spec    *spec.Descriptor
		want    string
		missing string
	}{
		{d[0], "remote_address=10.0.0.1", ""},
		{d[1], "user_id=alice, path=/api/x", ""},
		{d[2], "generic_key=uploads, method=POST", ""},
		{d[3], "", "header x-request-id"},
	} {
		entries, missing := c.spec.Build(a, nil)
		if formatEntries(entries) != c.want || missing != c.missing {
			t.Errorf("line %d: %q missing %q, want %q missing %q", c.spec.Line, formatEntries(entries), missing, c.want, c.missing)
		}
	}
	if cost, ok, err := d[2].HitsAddend(a); cost != 7 || !ok || err != nil {
		t.Errorf("cost header: %d %v %v", cost, ok, err)
	}
	if _, ok, err := d[1].HitsAddend(a); ok || err != nil {
		t.Errorf("no cost header: %v %v", ok, err)
	}
	var ce *spec.CostError
	if _, _, err := d[2].HitsAddend(&spec.Attributes{Headers: headers{"x-cost": "-1"}}); !errors.As(err, &ce) {
		t.Errorf("negative cost: %v", err)
	}
	// Nothing known: every descriptor but the constant one is skipped.
	empty := &spec.Attributes{}
	if _, missing := d[0].Build(empty, nil); missing != "remote address" {
		t.Errorf("no address: %q", missing)
	}
	if _, missing := d[2].Build(empty, nil); missing != "method" {
		t.Errorf("no method: %q", missing)
	}
	skip := &spec.Descriptor{Actions: []spec.Action{
		{Kind: spec.ActionRequestHeader, Key: "a", Header: "a", SkipIfAbsent: true},
		{Kind: spec.ActionGenericKey, Key: "k", Value: "v"},
	}}
	if e, missing := skip.Build(empty, []spec.Entry{{Key: "keep"}}); formatEntries(e) != "keep=, k=v" || missing != "" {
		t.Errorf("skip_if_absent: %q %q", formatEntries(e), missing)
	}
}

func TestParseErrors(t *testing.T) {
	bad := `domains:
  edge:
    - name: r
      match: [{key: k}]
      capacity: 1
      refill: 1/s
front_doors:
  ext_authz:
    default_domain: other
    trusted_proxy_hops: -1
    original_request: x-forwarded
    domains:
      nope:
        - actions: [{remote_address: {}}]
      edge:
        - actions: []
        - actions: [{teleport: {}}, {requst_headers: {}}]
        - actions: [{request_headers: {header_name: "bad header"}}]
        - actions: [{generic_key: {}}, {path: {strip_query: maybe}}]
        - actions: [{method: {}}, {method: {}}]
          hits_addend: {request_header: x-cost, extra: 1}
        - actions: [{host: {descriptor_key: k, color: red}}]
  forward_auth:
    domains: {edge: [{actions: [{remote_address: }]}]}
  grpc:
    domains: {}
`
	_, err := policy.Parse("bad.yaml", []byte(bad))
	var errs policy.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		`bad.yaml:9: front_doors.ext_authz.default_domain: "other" is not one of the front door's domains (edge)`,
		`bad.yaml:10: front_doors.ext_authz.trusted_proxy_hops: -1: want 0 (use the direct peer) to 16`,
		`bad.yaml:11: front_doors.ext_authz.original_request: only forward_auth has it`,
		`bad.yaml:13: front_doors.ext_authz.domains.nope: the policy has no domain "nope" (domains: edge)`,
		`bad.yaml:16: front_doors.ext_authz.domains.edge[1].actions: empty: a descriptor needs at least one action`,
		`bad.yaml:17: front_doors.ext_authz.domains.edge[2].actions[1]: unknown action "teleport" (known: remote_address, request_headers, `,
		`bad.yaml:17: front_doors.ext_authz.domains.edge[2].actions[2]: unknown action "requst_headers" (did you mean request_headers?)`,
		`bad.yaml:18: front_doors.ext_authz.domains.edge[3].actions[1].request_headers.descriptor_key: missing`,
		`bad.yaml:18: front_doors.ext_authz.domains.edge[3].actions[1].request_headers.header_name: "bad header" is not an HTTP header name`,
		`bad.yaml:19: front_doors.ext_authz.domains.edge[4].actions[1].generic_key.descriptor_value: missing`,
		`bad.yaml:19: front_doors.ext_authz.domains.edge[4].actions[2].path.strip_query: want true or false, got "maybe"`,
		`bad.yaml:21: front_doors.ext_authz.domains.edge[5].hits_addend: unknown field "extra" (known: request_header)`,
		`bad.yaml:22: front_doors.ext_authz.domains.edge[6].actions[1].host: unknown field "color" (known: descriptor_key, lowercase)`,
		`bad.yaml:24: front_doors.forward_auth.original_request: missing: say which headers`,
		`bad.yaml:25: front_doors: unknown field "grpc" (known: ext_authz, forward_auth)`,
	}
	got := strings.Split(err.Error(), "\n")
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, w)
		}
		if !found {
			t.Errorf("missing issue %q in\n%s", w, err)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d issues, want %d:\n%s", len(got), len(want), err)
	}
	// A repeated descriptor key is refused on its own.
	dup := strings.Replace(testPolicy, "- method:\n", "- method:\n            - method: {}\n", 1)
	if _, err := policy.Parse("dup.yaml", []byte(dup)); err == nil || !strings.Contains(err.Error(), `descriptor_key "method" repeated`) {
		t.Errorf("repeated key: %v", err)
	}
}

func TestParseWarnings(t *testing.T) {
	src := strings.Replace(testPolicy, "- path: {strip_query: true}", "- path: {descriptor_key: route}", 1)
	p, err := policy.Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Warnings()
	if len(w) != 1 || !strings.Contains(w[0].Error(), `no rule of domain "edge" has the keys (user_id, route)`) {
		t.Fatalf("warnings: %v", w)
	}
}

func formatEntries(entries []spec.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ", ")
}
