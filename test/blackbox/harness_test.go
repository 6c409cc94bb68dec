// Package blackbox tests the built tokengate binary from the outside: real
// processes on loopback ports, a real gRPC client, real files.
package blackbox

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

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// binary is the tokengate binary built once for the package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokengate-blackbox")
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
	client   rlsv3.RateLimitServiceClient
	conn     *grpc.ClientConn
	exited   chan error
}

// start runs tokengate on free loopback ports with the extra flags and
// waits until it serves. It is stopped when the test ends.
func start(t *testing.T, flags ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json", "--shutdown-timeout", "5s"}, flags...)
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
	p.client = rlsv3.NewRateLimitServiceClient(p.conn)
	t.Cleanup(func() {
		p.conn.Close()
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				p.cmd.Process.Kill()
			}
		}
	})
	return p
}

// stop sends SIGTERM and returns the process's exit error.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		return err
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		t.Fatal("tokengate did not exit within 20s of SIGTERM")
		return nil
	}
}

// descriptor builds a descriptor from key=value pairs.
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (p *proc) ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// get fetches an HTTP path of the process and returns status and body.
func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// metric returns the value of one sample line of /metrics, e.g.
// `tokengate_policy_reloads_total{result="failure"}`, or "" when absent.
func (p *proc) metric(t *testing.T, sample string) string {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// eventually polls cond every 20ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writePolicy replaces path's content atomically (write then rename), as
// editors and Kubernetes do.
func writePolicy(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
