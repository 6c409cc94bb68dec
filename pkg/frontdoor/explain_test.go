package frontdoor

import (
	"os"
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

// TestLoginSpellingsShareABucket: with config/examples/front-doors.yaml,
// every spelling of /login that a backend serves as /login hits the
// login-per-client rule with the bucket key of /login, through both doors;
// explain shows the path as normalised. With normalize_path: false they
// are paths of their own again.
func TestLoginSpellingsShareABucket(t *testing.T) {
	data, err := os.ReadFile("../../config/examples/front-doors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	key := func(t *testing.T, p *policy.Policy, door, path string) string {
		t.Helper()
		e, err := Explain(p, door, "", &spec.Attributes{RemoteAddress: "198.51.100.7", Method: "POST", Path: path})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range e.Items {
			if it.Explanation != nil && it.Rule != nil && it.Rule.Name == "login-per-client" {
				return string(it.Key)
			}
		}
		return ""
	}
	p, err := policy.Parse("front-doors.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, door := range []string{spec.ExtAuthz, spec.ForwardAuth} {
		want := key(t, p, door, "/login")
		if want == "" {
			t.Fatalf("%s: /login does not hit login-per-client", door)
		}
		for _, path := range []string{"//login", "/./login", "/%6cogin", "/api/../login", "/login;jsessionid=1",
			"/login/", "/LOGIN", "/%2e%2e/login?next=/", `\login`, "/login/."} {
			if got := key(t, p, door, path); got != want {
				t.Errorf("%s %q: bucket key %q, want %q (/login's)", door, path, got, want)
			}
		}
	}
	e, _ := Explain(p, spec.ForwardAuth, "", &spec.Attributes{Path: "/api/../login?next=//x"})
	if s := e.String(); !strings.Contains(s, ` path=/login?next=//x (normalised from "/api/../login?next=//x") `) {
		t.Errorf("normalised path not shown:\n%s", s)
	}
	raw, err := policy.Parse("front-doors.yaml", []byte(strings.Replace(string(data), "    trusted_proxy_hops: 1\n", "    trusted_proxy_hops: 1\n    normalize_path: false\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := key(t, raw, spec.ForwardAuth, "//login"); got != "" {
		t.Errorf("normalize_path: false: //login hit login-per-client (%q)", got)
	}
	if got := key(t, raw, spec.ExtAuthz, "//login"); got == "" {
		t.Error("normalize_path: false on forward_auth turned it off for ext_authz")
	}
}
