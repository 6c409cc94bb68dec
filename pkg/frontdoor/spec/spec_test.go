package policy

import (
	"errors"
	"strings"
	"testing"
)

const frontDoorPolicy = `request_id_key: request_id
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

func TestFrontDoorParse(t *testing.T) {
	p, err := Parse("p.yaml", []byte(frontDoorPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings()) != 0 {
		t.Fatalf("warnings: %v", p.Warnings())
	}
	ea := p.FrontDoor(FrontDoorExtAuthz)
	if ea == nil || ea.TrustedProxyHops != 0 || ea.OriginalRequest != OriginalUnset || ea.Domain("") == nil {
		t.Fatalf("ext_authz: %+v", ea)
	}
	d := ea.Domain("edge").Descriptors
	if len(d) != 4 || d[1].Actions[0].Header != "x-user-id" || d[1].Actions[0].Key != "user_id" ||
		d[1].Actions[1].Key != "path" || !d[1].Actions[1].StripQuery || d[2].HitsAddendHeader != "x-cost" || d[2].Actions[1].Kind != ActionMethod {
		t.Fatalf("ext_authz descriptors: %+v %+v %+v", d[1], d[1].Actions, d[2])
	}
	fa := p.FrontDoor(FrontDoorForwardAuth)
	if fa.TrustedProxyHops != 1 || fa.OriginalRequest != OriginalXOriginal || fa.Domain("") != nil || fa.Domain("other") == nil {
		t.Fatalf("forward_auth: %+v", fa)
	}
	if got := len(p.FrontDoors()); got != 2 {
		t.Fatalf("%d front doors", got)
	}
}

func TestFrontDoorBuild(t *testing.T) {
	p, err := Parse("p.yaml", []byte(frontDoorPolicy))
	if err != nil {
		t.Fatal(err)
	}
	d := p.FrontDoor(FrontDoorExtAuthz).Domain("edge").Descriptors
	a := &Attributes{RemoteAddress: "10.0.0.1", Method: "POST", Path: "/api/x?q=1", Headers: headers{"x-user-id": "alice", "x-cost": " 7 "}}
	for _, c := range []struct {
		spec    *DescriptorSpec
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
	var ce *CostError
	if _, _, err := d[2].HitsAddend(&Attributes{Headers: headers{"x-cost": "-1"}}); !errors.As(err, &ce) {
		t.Errorf("negative cost: %v", err)
	}
	// Nothing known: every descriptor but the constant one is skipped.
	empty := &Attributes{}
	if _, missing := d[0].Build(empty, nil); missing != "remote address" {
		t.Errorf("no address: %q", missing)
	}
	if _, missing := d[2].Build(empty, nil); missing != "method" {
		t.Errorf("no method: %q", missing)
	}
	skip := &DescriptorSpec{Actions: []Action{
		{Kind: ActionRequestHeader, Key: "a", Header: "a", SkipIfAbsent: true},
		{Kind: ActionGenericKey, Key: "k", Value: "v"},
	}}
	if e, missing := skip.Build(empty, []Entry{{Key: "keep"}}); formatEntries(e) != "keep=, k=v" || missing != "" {
		t.Errorf("skip_if_absent: %q %q", formatEntries(e), missing)
	}
}

func TestClientAddress(t *testing.T) {
	for _, c := range []struct {
		hops int
		peer string
		xff  []string
		want string
	}{
		{0, "10.0.0.9:5555", []string{"1.1.1.1"}, "10.0.0.9"},
		{1, "10.0.0.9:5555", nil, "10.0.0.9"},
		{1, "10.0.0.9", []string{"6.6.6.6, 1.1.1.1"}, "1.1.1.1"},
		{1, "10.0.0.9", []string{"6.6.6.6", "1.1.1.1"}, "1.1.1.1"},
		{2, "10.0.0.9", []string{"6.6.6.6, 1.1.1.1, 10.0.0.8"}, "1.1.1.1"},
		{3, "10.0.0.9", []string{"1.1.1.1, 10.0.0.8"}, "10.0.0.9"},           // too short: the peer
		{1, "10.0.0.9", []string{"1.1.1.1, 10.0.0.9"}, "1.1.1.1"},            // Envoy appended its peer
		{1, "[::ffff:10.0.0.9]:80", []string{" 1.1.1.1:443 , ,"}, "1.1.1.1"}, // ports, blanks
		{1, "::1", []string{"2001:DB8::1"}, "2001:db8::1"},                   // canonical
		{1, "::1", []string{"unknown"}, "unknown"},                           // kept as is
		{1, "10.0.0.9", []string{"::ffff:1.2.3.4"}, "1.2.3.4"},               // unmapped
		{2, "10.0.0.9", []string{"1.1.1.1, 10.0.0.9, 10.0.0.9"}, "1.1.1.1"},  // only the rightmost is dropped
		{1, "10.0.0.9", []string{strings.Repeat("9.9.9.9,", 100) + "1.1.1.1"}, "1.1.1.1"},
	} {
		fd := &FrontDoor{TrustedProxyHops: c.hops}
		if got := fd.ClientAddress(c.peer, c.xff); got != c.want {
			t.Errorf("hops %d peer %q xff %q: %q, want %q", c.hops, c.peer, c.xff, got, c.want)
		}
	}
}

func TestFrontDoorErrors(t *testing.T) {
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
        - actions: [{teleport: {}}]
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
	_, err := Parse("bad.yaml", []byte(bad))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		`bad.yaml:9: front_doors.ext_authz.default_domain: "other" is not one of the front door's domains (edge)`,
		`bad.yaml:10: front_doors.ext_authz.trusted_proxy_hops: -1: want 0 (use the direct peer) to 16`,
		`bad.yaml:11: front_doors.ext_authz.original_request: only forward_auth has it`,
		`bad.yaml:13: front_doors.ext_authz.domains.nope: the policy has no domain "nope" (domains: edge)`,
		`bad.yaml:16: front_doors.ext_authz.domains.edge[1].actions: empty: a descriptor needs at least one action`,
		`bad.yaml:17: front_doors.ext_authz.domains.edge[2].actions[1]: unknown action "teleport"`,
		`bad.yaml:18: front_doors.ext_authz.domains.edge[3].actions[1].request_headers.descriptor_key: missing`,
		`bad.yaml:18: front_doors.ext_authz.domains.edge[3].actions[1].request_headers.header_name: "bad header" is not an HTTP header name`,
		`bad.yaml:19: front_doors.ext_authz.domains.edge[4].actions[1].generic_key.descriptor_value: missing`,
		`bad.yaml:19: front_doors.ext_authz.domains.edge[4].actions[2].path.strip_query: want true or false, got "maybe"`,
		`bad.yaml:21: front_doors.ext_authz.domains.edge[5].hits_addend: unknown field "extra" (known: request_header)`,
		`bad.yaml:22: front_doors.ext_authz.domains.edge[6].actions[1].host: unknown field "color" (known: descriptor_key)`,
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
	dup := strings.Replace(frontDoorPolicy, "- method:\n", "- method:\n            - method: {}\n", 1)
	if _, err := Parse("dup.yaml", []byte(dup)); err == nil || !strings.Contains(err.Error(), `descriptor_key "method" repeated`) {
		t.Errorf("repeated key: %v", err)
	}
}

func TestFrontDoorWarnings(t *testing.T) {
	src := strings.Replace(frontDoorPolicy, "- path: {strip_query: true}", "- path: {descriptor_key: route}", 1)
	p, err := Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Warnings()
	if len(w) != 1 || !strings.Contains(w[0].Error(), `no rule of domain "edge" has the keys (user_id, route)`) {
		t.Fatalf("warnings: %v", w)
	}
}

func TestExplainFrontDoor(t *testing.T) {
	p, err := Parse("p.yaml", []byte(frontDoorPolicy))
	if err != nil {
		t.Fatal(err)
	}
	a := &Attributes{RemoteAddress: "10.0.0.1", Path: "/api/x", Headers: headers{"x-user-id": "alice", "x-cost": "abc"}}
	e, err := p.ExplainFrontDoor(FrontDoorExtAuthz, "", a)
	if err != nil {
		t.Fatal(err)
	}
	s := e.String()
	for _, want := range []string{
		`front door ext_authz (p.yaml:23), domain "edge", trusted_proxy_hops 0`,
		"descriptor 1 (p.yaml:26): remote_address=10.0.0.1\n  matches rule \"per-client\" (p.yaml:4)",
		"descriptor 2 (p.yaml:28): user_id=alice, path=/api/x\n  matches rule \"per-user-path\"",
		"descriptor 3 (p.yaml:31): skipped: the request has no method",
		"descriptor 4 (p.yaml:35): skipped: the request has no header x-request-id",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	a.Method = "PUT"
	e, _ = p.ExplainFrontDoor(FrontDoorExtAuthz, "edge", a)
	if s := e.String(); !strings.Contains(s, `refused: cost header x-cost: "abc" is not a whole number`) {
		t.Errorf("cost error not shown:\n%s", s)
	}
	if _, err := p.ExplainFrontDoor(FrontDoorForwardAuth, "", a); err == nil || !strings.Contains(err.Error(), "several domains (edge, other)") {
		t.Errorf("ambiguous domain: %v", err)
	}
	if _, err := p.ExplainFrontDoor(FrontDoorForwardAuth, "internal", a); err == nil {
		t.Error("unknown domain explained")
	}
	e, _ = p.ExplainFrontDoor(FrontDoorForwardAuth, "other", &Attributes{})
	if s := e.String(); !strings.Contains(s, "original request from x-original headers") || !strings.Contains(s, "no descriptor applies") {
		t.Errorf("nothing applies:\n%s", s)
	}
}
