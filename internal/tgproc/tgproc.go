// Package tgproc runs the built tokengate binary for black-box tests: a
// real process on free loopback ports, a real gRPC client, real files. The
// packages under test/ share it, and so do the tests of cmd/tokengate,
// pkg/server and tools/ that run the binary.
package tgproc

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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Timeout is how long a test waits for a running tokengate to act on
// something (a reload, a signal, a health change, a metric), as in
// poll.Eventually(t, tgproc.Timeout, cond, msg).
const Timeout = 15 * time.Second

// Main is a test package's TestMain: it builds tokengate (with the race
// detector when race is set) into a temporary directory, stores its path in
// *binary, runs the tests and removes the directory. It returns the exit
// code.
func Main(m *testing.M, binary *string, race bool) int {
	dir, err := os.MkdirTemp("", "tokengate-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "tokengate")
	args := []string{"build", "-o", *binary}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/tokengate/tokengate/cmd/tokengate")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tokengate:", err)
		return 1
	}
	return m.Run()
}

// Proc is one running tokengate.
type Proc struct {
	GRPCAddr string
	HTTPAddr string
	// DebugAddr and MetricsAddr are the debug and metrics listeners'
	// addresses, "" when there are none.
	DebugAddr, MetricsAddr string
	Conn                   *grpc.ClientConn
	RLS                    rlsv3.RateLimitServiceClient
	cmd                    *exec.Cmd
	exited                 chan error
}

// Start runs binary on free loopback ports with the extra flags, waits
// until it serves, and stops it (SIGTERM, then SIGKILL) when the test ends.
func Start(t *testing.T, binary string, flags ...string) *Proc {
	t.Helper()
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-timeout", "5s"}, flags...)
	return launch(t, exec.Command(binary, args...))
}

// StartAs runs binary by the name name (a symbolic link to it in a
// temporary directory, as the image's /bin/ratelimit is), with no
// arguments and only the environment env, which must make it log in JSON
// at level info or below, and waits until it serves, as Start does.
func StartAs(t *testing.T, binary, name string, env ...string) *Proc {
	t.Helper()
	return launch(t, CommandAs(t, binary, name, env...))
}

// CommandAs is the command that runs binary by the name name, with no
// arguments and only the environment env.
func CommandAs(t *testing.T, binary, name string, env ...string) *exec.Cmd {
	t.Helper()
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link)
	cmd.Env = append([]string{}, env...)
	return cmd
}

// launch starts cmd, a tokengate logging in JSON, and waits until it
// serves.
func launch(t *testing.T, cmd *exec.Cmd) *Proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, exited: make(chan error, 1)}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, GRPC, HTTP, Debug, Metrics string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				p.GRPCAddr, p.HTTPAddr, p.DebugAddr, p.MetricsAddr = line.GRPC, line.HTTP, line.Debug, line.Metrics
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
	p.Conn, err = grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.RLS = rlsv3.NewRateLimitServiceClient(p.Conn)
	t.Cleanup(func() {
		p.Conn.Close()
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

// Memory reads one of the process's sizes in /proc/PID/status (VmRSS,
// VmHWM: its peak RSS), in bytes.
func (p *Proc) Memory(t *testing.T, field string) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
	return 0
}

// Stop sends SIGTERM and returns the process's exit error.
func (p *Proc) Stop(t *testing.T) error {
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

// Ask calls ShouldRateLimit and fails the test on an error.
func (p *Proc) Ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// Get fetches an HTTP path of the process and returns status and body.
func (p *Proc) Get(t *testing.T, path string) (int, string) {
	t.Helper()
	return GetURL(t, "http://"+p.HTTPAddr+path)
}

// GetURL fetches url and returns status and body.
func GetURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
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

// Metric returns the value of one sample line of /metrics, e.g.
// `tokengate_policy_reloads_total{result="failure"}`, or "" when absent.
func (p *Proc) Metric(t *testing.T, sample string) string {
	t.Helper()
	return MetricAt(t, p.HTTPAddr, sample)
}

// MetricAt is Metric of the tokengate serving HTTP on addr.
func MetricAt(t *testing.T, addr, sample string) string {
	t.Helper()
	_, body := GetURL(t, "http://"+addr+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// WantMetrics reports an error for each sample of want whose value on
// /metrics is not the one given ("" for absent).
func (p *Proc) WantMetrics(t *testing.T, want map[string]string) {
	t.Helper()
	for sample, v := range want {
		if got := p.Metric(t, sample); got != v {
			t.Errorf("%s = %q, want %q", sample, got, v)
		}
	}
}

// WaitHealth waits up to Timeout, on a grpc.health.v1 Watch stream, until
// the health of service on conn is want.
func WaitHealth(t *testing.T, conn *grpc.ClientConn, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("health %q: waiting for %v: %v", service, want, err)
		}
		if resp.Status == want {
			return
		}
	}
}

// Health returns the health of service on conn now.
func Health(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	return resp.Status
}

// Descriptor builds a descriptor from key, value pairs.
func Descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Header returns a response header tokengate asked Envoy to add, "" if none.
func Header(r *rlsv3.RateLimitResponse, key string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, key) {
			return h.Value
		}
	}
	return ""
}

// Reason returns the reason in a response's dynamic metadata (of the
// descriptor that decided), "" if none: where a refusal says why unless
// --client-reason-header also puts it in x-tokengate-reason.
func Reason(r *rlsv3.RateLimitResponse) string {
	return r.GetDynamicMetadata().GetFields()["reason"].GetStringValue()
}

// Degraded reports whether a response's dynamic metadata marks a
// descriptor degraded (on_store_error answered), at the top level or in
// its list of descriptors.
func Degraded(r *rlsv3.RateLimitResponse) bool {
	f := r.GetDynamicMetadata().GetFields()
	if f["degraded"].GetBoolValue() {
		return true
	}
	for _, d := range f["descriptors"].GetListValue().GetValues() {
		if d.GetStructValue().GetFields()["degraded"].GetBoolValue() {
			return true
		}
	}
	return false
}

// WritePolicy replaces path's content atomically (write, then rename), as
// editors and Kubernetes do.
func WritePolicy(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// PolicyFile writes content to policy.yaml in a new temporary directory and
// returns its path.
func PolicyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	WritePolicy(t, path, content)
	return path
}
