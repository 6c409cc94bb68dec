package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDenyStatusSettings(t *testing.T) {
	t.Setenv("TOKENGATE_FORWARD_AUTH_DENY_STATUS", "403")
	s, err := loadSettings(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.ExtAuthzDenyStatus != 429 || s.ForwardAuthDenyStatus != 403 {
		t.Fatalf("deny statuses %d %d", s.ExtAuthzDenyStatus, s.ForwardAuthDenyStatus)
	}
	for _, args := range [][]string{{"--forward-auth-deny-status", "200"}, {"--ext-authz-deny-status", "600"}} {
		if _, err := loadSettings(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

func TestExplainFrontDoor(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	pol := `domains:
  edge:
    - name: per-user
      match: [{key: user_id}, {key: path, value: /api/*}]
      capacity: 10
      refill: 1/s
front_doors:
  forward_auth:
    trusted_proxy_hops: 1
    original_request: x-forwarded
    domains:
      edge:
        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: X-User, descriptor_key: user_id}
            - path: {}
`
	if err := os.WriteFile(file, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--policy", file, "--front-door", "forward_auth", "--header", "X-User=alice", "--path", "/api/x"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "descriptor 1 (") || !strings.Contains(out.String(), "skipped: the request has no remote address") ||
		!strings.Contains(out.String(), "user_id=alice, path=/api/x\n  matches rule \"per-user\"") {
		t.Fatalf("exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run([]string{"explain", "--policy", file, "--front-door", "ext_authz"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "no front_doors.ext_authz section") {
		t.Fatalf("missing front door: exit %d %q", code, errOut.String())
	}
	if code := run([]string{"explain", "--policy", file, "--front-door", "forward_auth", "user_id=x"}, &out, &errOut); code != 1 {
		t.Fatalf("entries with --front-door: exit %d", code)
	}
}
