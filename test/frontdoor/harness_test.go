// Package frontdoor tests the front doors of the built tokengate binary
// from the outside: a real process on loopback ports, a real gRPC client for
// ext_authz and ratelimit, real HTTP requests shaped like those of Traefik,
// Caddy and ingress-nginx for forward-auth. The harness follows
// test/blackbox.
package frontdoor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// binary is the tokengate binary built once for the package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokengate-frontdoor")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "tokengate")
	build := exec.Command("go", "build", "-race", "-o", binary, "github.com/tokengate/tokengate/cmd/tokengate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tokengate:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running tokengate.
type proc struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	conn     *grpc.ClientConn
	authz    authv3.AuthorizationClient
	rls      rlsv3.RateLimitServiceClient
	exited   chan error
}

// start writes the policy to a file and runs tokengate on free loopback
// ports with it and the extra flags, until the test ends.
func start(t *testing.T, policy string, flags ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--policy", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-timeout", "5s"}, flags...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1)}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				p.grpcAddr, p.httpAddr = line.GRPC, line.HTTP
				close(serving)
			}
			t.Logf("tokengate: %s", sc.Text())
		}
		io.Copy(io.Discard, stderr)
		p.exited <- cmd.Wait()
	}()
	select {
	case <-serving:
	case err := <-p.exited:
		t.Fatalf("tokengate exited before serving: %v", err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("tokengate did not serve within 30s")
	}
	p.conn, err = grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.authz, p.rls = authv3.NewAuthorizationClient(p.conn), rlsv3.NewRateLimitServiceClient(p.conn)
	t.Cleanup(func() {
		p.conn.Close()
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
		}
	})
	return p
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
	resp, err := p.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// forwardAuth sends a forward-auth request with the headers an ingress
// would and returns the response with its body read.
func (p *proc) forwardAuth(t *testing.T, method, query string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.httpAddr+"/v1/check"+query, nil)
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

// get fetches an HTTP path of the process.
func (p *proc) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// metric returns the value of one sample line of /metrics, "" if absent.
func (p *proc) metric(t *testing.T, sample string) string {
	t.Helper()
	for _, line := range strings.Split(p.get(t, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}
