package frontdoor

import (
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

type headers map[string]string

func (h headers) Header(name string) (string, bool) { v, ok := h[name]; return v, ok }

func TestExplain(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	a := &spec.Attributes{RemoteAddress: "10.0.0.1", Path: "/api/x", Headers: headers{"x-user": "alice"}}
	e, err := Explain(p, spec.ExtAuthz, "", a)
	if err != nil {
		t.Fatal(err)
	}
	s := e.String()
	for _, want := range []string{
		`front door ext_authz (p.yaml:23), domain "edge", trusted_proxy_hops 0`,
		"request: remote_address=10.0.0.1 method=- path=/api/x host=- scheme=-\n",
		"descriptor 1 (p.yaml:26): remote_address=10.0.0.1\n  matches rule \"per-client\" (p.yaml:3)",
		"descriptor 2 (p.yaml:27): user_id=alice, path=/api/x\n  matches rule \"per-user\"",
		"descriptor 3 (p.yaml:31): skipped: the request has no host",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	a.Headers = headers{"x-user": "alice", "x-cost": "7"}
	e, _ = Explain(p, spec.ExtAuthz, "edge", a)
	if s := e.String(); !strings.Contains(s, "path=/api/x\n  cost 7 (header x-cost)\n  matches rule \"per-user\"") {
		t.Errorf("cost not shown:\n%s", s)
	}
	a.Headers = headers{"x-user": "alice", "x-cost": "abc"}
	e, _ = Explain(p, spec.ExtAuthz, "edge", a)
	if s := e.String(); !strings.Contains(s, `refused: cost header x-cost: "abc" is not a whole number`) {
		t.Errorf("cost error not shown:\n%s", s)
	}
	if _, err := Explain(p, spec.ForwardAuth, "other", a); err == nil || !strings.Contains(err.Error(), `does not serve domain "other" (it serves edge)`) {
		t.Errorf("unknown domain: %v", err)
	}
	e, _ = Explain(p, spec.ForwardAuth, "", &spec.Attributes{})
	if s := e.String(); !strings.Contains(s, "original request from x-original headers") || !strings.Contains(s, "no descriptor applies") {
		t.Errorf("nothing applies:\n%s", s)
	}
	noDefault, err := policy.Parse("p.yaml", []byte(strings.Replace(testPolicy, "    default_domain: edge\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Explain(noDefault, spec.ExtAuthz, "", a); err == nil || !strings.Contains(err.Error(), "several domains (edge, other)") {
		t.Errorf("ambiguous domain: %v", err)
	}
	none, err := policy.Parse("p.yaml", []byte(strings.Split(testPolicy, "front_doors:")[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Explain(none, spec.ExtAuthz, "", a); err == nil || !strings.Contains(err.Error(), "no front_doors.ext_authz section") {
		t.Errorf("no section: %v", err)
	}
}
