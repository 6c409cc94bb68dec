// Package frontdoor tests the front doors of the built tokengate binary
// from the outside: a real process on loopback ports, a real gRPC client for
// ext_authz and ratelimit, real HTTP requests shaped like those of Traefik,
// Caddy and ingress-nginx for forward-auth. The harness follows
// test/blackbox.
package frontdoor

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/tgproc"
)

var binary string

func TestMain(m *testing.M) { os.Exit(tgproc.Main(m, &binary, true)) }

type proc struct {
	*tgproc.Proc
	authz authv3.AuthorizationClient
}

// start writes the policy to a file and runs tokengate on free loopback
// ports with it and the extra flags, until the test ends.
func start(t *testing.T, policy string, flags ...string) *proc {
	t.Helper()
	p := tgproc.Start(t, binary, append([]string{"--policy", tgproc.PolicyFile(t, policy)}, flags...)...)
	return &proc{Proc: p, authz: authv3.NewAuthorizationClient(p.Conn)}
}

func (p *proc) check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.authz.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return resp
}

func (p *proc) shouldRateLimit(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.RLS.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// forwardAuth sends a forward-auth request with the headers an ingress
// would and returns the response with its body read.
func (p *proc) forwardAuth(t *testing.T, method, query string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.HTTPAddr+"/v1/check"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}
