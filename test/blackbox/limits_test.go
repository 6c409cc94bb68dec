package blackbox

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/internal/tgproc"
)

// idPolicy charges each user 1 per request from a bucket that 250 requests
// cannot empty, and names the request-id descriptor.
const idPolicy = `revision: 1
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 1000
      refill: 1/h
`

// TestLongRequestIDsKeepNoMemory (the built binary): 250 requests whose ids
// are about 1 MB each, just within the gRPC message limit, raise the
// process's RSS by at most 120 MB. The ids are remembered (the last one
// still replays) but as 16-byte hashes; before they were hashed the memory
// store kept each id whole, 250 MB and more.
func TestLongRequestIDsKeepNoMemory(t *testing.T) {
	const (
		requests  = 250
		idBytes   = 1_000_000 // the whole request stays under 1 MiB
		maxGrowth = 120 << 20
	)
	path := tgproc.PolicyFile(t, idPolicy)
	p := start(t, "--policy", path)
	user := tgproc.Descriptor("user_id", "mallory")
	p.Ask(t, "edge", 0, user)
	before := p.Memory(t, "VmRSS")

	id := bytes.Repeat([]byte{'x'}, idBytes)
	var last string
	for i := range requests {
		copy(id, strconv.Itoa(i)+":") // each id its own
		last = string(id)
		if r := p.Ask(t, "edge", 0, user, tgproc.Descriptor("request_id", last)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(1000-2-i) {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	after := p.Memory(t, "VmRSS")
	t.Logf("VmRSS %d KiB before, %d KiB after %d requests with %d-byte ids (+%d KiB)", before>>10, after>>10, requests, idBytes, (after-before)>>10)
	if after-before > maxGrowth {
		t.Errorf("RSS grew by %d MiB, want at most %d MiB", (after-before)>>20, maxGrowth>>20)
	}

	remaining := uint32(1000 - 1 - requests)
	if r := p.Ask(t, "edge", 0, user, tgproc.Descriptor("request_id", last)); r.Statuses[0].LimitRemaining != remaining {
		t.Fatalf("a repeat of the last id was not replayed: %v", r)
	}
	if r := p.Ask(t, "edge", 0, user); r.Statuses[0].LimitRemaining != remaining-1 {
		t.Fatalf("the replay was charged: %v", r)
	}
}

// limitsPolicy has a limited key (user_id), the request id, and both
// front doors reading them from headers.
const limitsPolicy = `revision: 1
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 1000
      refill: 1/h
front_doors:
  ext_authz:
    domains:
      edge:
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
        - actions: [{request_headers: {header_name: x-request-id, descriptor_key: request_id}}]
  forward_auth:
    original_request: x-forwarded
    domains:
      edge:
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
        - actions: [{request_headers: {header_name: x-request-id, descriptor_key: request_id}}]
`

// TestSizeLimits (the built binary): what a client gets past each size
// limit docs/limits.md lists, through each front door.
func TestSizeLimits(t *testing.T) {
	p, path := startWithPolicy(t, limitsPolicy)
	const maxValue = 4096
	long := func(n int) string { return strings.Repeat("v", n) }

	t.Run("ShouldRateLimit", func(t *testing.T) {
		many := func(n int, d *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
			ds := make([]*ratelimitv3.RateLimitDescriptor, n)
			for i := range ds {
				ds[i] = d
			}
			return ds
		}
		entries := make([]string, 0, 66)
		for i := range 33 {
			entries = append(entries, "k"+strconv.Itoa(i), "v")
		}
		for _, tc := range []struct {
			name string
			ds   []*ratelimitv3.RateLimitDescriptor
			code codes.Code
			msg  string
		}{
			{"message over 1 MiB", many(1, tgproc.Descriptor("user_id", long(1<<20))), codes.ResourceExhausted, "grpc: received message larger than max ("},
			{"65 descriptors", many(65, tgproc.Descriptor("user_id", "u")), codes.InvalidArgument, "65 descriptors: at most 64"},
			{"33 entries", many(1, tgproc.Descriptor(entries...)), codes.InvalidArgument, "descriptor 0 has 33 entries: want 1 to 32"},
			{"257-byte key", many(1, tgproc.Descriptor(strings.Repeat("k", 257), "v")), codes.InvalidArgument, "descriptor 0 entry 0: key of 257 bytes: want 1 to 256"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := p.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: tc.ds})
				if s := status.Convert(err); s.Code() != tc.code || !strings.HasPrefix(s.Message(), tc.msg) {
					t.Fatalf("got %v, want %v %q", err, tc.code, tc.msg)
				}
			})
		}
		t.Run("4097-byte value", func(t *testing.T) {
			r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", long(maxValue+1)))
			if want := `descriptor value of 4097 bytes for key "user_id" (at most 4096)`; r.OverallCode != over || r.Statuses[0].Code != over || tgproc.Reason(r) != want ||
				tgproc.Header(r, "x-tokengate-reason") != "" {
				t.Fatalf("got %v, want OVER_LIMIT and the reason %q in the metadata alone", r, want)
			}
		})
		t.Run("1 MB request id", func(t *testing.T) {
			if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "u"), tgproc.Descriptor("request_id", long(1_000_000))); r.OverallCode != ok {
				t.Fatalf("got %v, want OK", r)
			}
		})
	})

	t.Run("ext_authz", func(t *testing.T) {
		authz := authv3.NewAuthorizationClient(p.Conn)
		check := func(headers map[string]string) (*authv3.CheckResponse, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
				Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/", Headers: headers},
			}}})
		}
		if _, err := check(map[string]string{"x-user-id": long(1 << 20)}); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("message over 1 MiB: %v, want ResourceExhausted", err)
		}
		r, err := check(map[string]string{"x-user-id": long(maxValue + 1)})
		if err != nil || codes.Code(r.Status.Code) != codes.PermissionDenied || r.GetDeniedResponse().GetStatus().GetCode() != http.StatusTooManyRequests {
			t.Errorf("4097-byte value: %v %v, want PERMISSION_DENIED with 429", r, err)
		}
		if r, err := check(map[string]string{"x-user-id": "u", "x-request-id": long(1_000_000)}); err != nil || codes.Code(r.Status.Code) != codes.OK {
			t.Errorf("1 MB request id: %v %v, want OK", r, err)
		}
	})

	t.Run("forward_auth", func(t *testing.T) {
		// Told why, so that the reason says which limit refused.
		p := start(t, "--policy", path, "--client-reason-header")
		for _, tc := range []struct {
			name    string
			headers map[string]string
			code    int
			reason  string // X-Tokengate-Reason, or the body for 431
		}{
			{"headers over 64 KiB and the slack", map[string]string{"X-Pad": long(68 << 10)}, http.StatusRequestHeaderFieldsTooLarge, "431 Request Header Fields Too Large"},
			{"4097-byte value", map[string]string{"X-User-Id": long(maxValue + 1)}, http.StatusTooManyRequests, `descriptor value of 4097 bytes for key "user_id" (at most 4096)`},
			{"32 KiB request id", map[string]string{"X-User-Id": "u", "X-Request-Id": long(32 << 10)}, http.StatusOK, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, err := http.NewRequest("GET", "http://"+p.HTTPAddr+"/v1/check", nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tc.headers {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got := resp.Header.Get("X-Tokengate-Reason")
				if tc.code == http.StatusRequestHeaderFieldsTooLarge {
					got = string(body)
				}
				if resp.StatusCode != tc.code || got != tc.reason {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, got, tc.code, tc.reason)
				}
			})
		}
	})
}

// pidOf finds the tokengate process started with the policy file path,
// which is in a directory of the test's own.
func pidOf(t *testing.T, path string) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00"+path+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			return pid
		}
	}
	t.Fatalf("no process runs with %s", path)
	return 0
}
