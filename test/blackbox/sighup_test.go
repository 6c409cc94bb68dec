package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/tgproc"
)

func hupPolicy(revision int) string {
	return fmt.Sprintf("revision: %d\ndomains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: %d\n      refill: 1000/s\n", revision, 1000+revision)
}

// TestSIGHUPReloadsUnderLoad: SIGHUP re-reads the policy while clients
// call, and no call fails. The policy path is a symlink into another
// directory and the file there is edited in place, so the watcher sees no
// event (and its 10 s poll does not come round during the test): only
// SIGHUP applies the edits. A file refused on SIGHUP, bad or a named pipe,
// leaves the last good policy serving and the watcher free to load the
// next one.
func TestSIGHUPReloadsUnderLoad(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.yaml")
	writeFile(t, target, hupPolicy(1))
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--policy", path)
	hangup := func() {
		t.Helper()
		if err := syscall.Kill(pidOf(t, path), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	var okCalls, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{tgproc.Descriptor("user_id", strconv.Itoa(w))}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := p.RLS.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("call failed: %v", err)
					return
				}
				okCalls.Add(1)
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	moreCalls := func(what string) {
		t.Helper()
		from := okCalls.Load()
		poll.Eventually(t, tgproc.Timeout, func() bool { return okCalls.Load() >= from+100 }, "100 calls "+what)
	}
	moreCalls("before any SIGHUP")

	writeFile(t, target, hupPolicy(2))
	if rev := servingRevision(t, p); rev != 1 {
		t.Fatalf("revision %d before SIGHUP: the edit was seen without it; the test proves nothing", rev)
	}
	hangup()
	poll.Eventually(t, tgproc.Timeout, func() bool { return servingRevision(t, p) == 2 }, "revision 2 after SIGHUP")
	moreCalls("after the reload")

	writeFile(t, target, hupPolicy(3)+"      on_store_error: sometimes\n")
	hangup()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_policy_reload_failures_total{reason="invalid"}`) == "1"
	}, "the refusal of an invalid file")

	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(target, 0o644); err != nil {
		t.Fatal(err)
	}
	hangup()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_policy_reload_failures_total{reason="not_regular_file"}`) == "1"
	}, "the refusal of a named pipe")
	if rev := servingRevision(t, p); rev != 2 {
		t.Fatalf("revision %d after refused reloads, want 2", rev)
	}
	moreCalls("after the refusals")

	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	writeFile(t, target, hupPolicy(4))
	for range 10 { // a burst: coalesced, none ends the process
		hangup()
	}
	poll.Eventually(t, tgproc.Timeout, func() bool { return servingRevision(t, p) == 4 }, "revision 4 after SIGHUP")
	moreCalls("after a burst of SIGHUPs")
	if got := p.Metric(t, `tokengate_policy_reloads_total{result="success"}`); got != "3" {
		t.Errorf("successful loads: %s, want 3 (the first and two SIGHUPs)", got)
	}

	stopLoad()
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed (%d ok)", failed.Load(), okCalls.Load())
	}
	if err := p.Stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	t.Logf("%d calls ok across 13 SIGHUPs", okCalls.Load())
}

// TestNamedPipePolicyAtStart: a named pipe as --policy is an error at
// start, not a hang.
func TestNamedPipePolicyAtStart(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policy.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--policy", fifo, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("tokengate still starting after 20s on a named pipe:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !bytes.Contains(out, []byte("not a regular file (named pipe)")) {
		t.Fatalf("exit %v, output:\n%s", err, out)
	}
}

// writeFile writes in place (truncate, then write), the edit no event of
// the symlink's directory reports.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// servingRevision is the revision /debug/policy reports.
func servingRevision(t *testing.T, p *tgproc.Proc) int64 {
	t.Helper()
	_, body := p.Get(t, "/debug/policy")
	var v struct{ Revision int64 }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/debug/policy: %v: %s", err, body)
	}
	return v.Revision
}
