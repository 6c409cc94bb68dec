// Package footprint tests the built tokengate binary's memory under
// hostile input from the outside: a real gRPC client on 127.0.0.1. The
// binary is built without the race detector, whose shadow memory would
// double what these tests measure (test/blackbox builds with it).
package footprint

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/internal/wiretest"
)

var binary string

func TestMain(m *testing.M) { os.Exit(tgproc.Main(m, &binary, false)) }

const policy = `revision: 1
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 1000
      refill: 1/h
`

// TestLargeRequestsKeepMemoryBounded: 32 concurrent 1 MiB ShouldRateLimit
// requests of empty descriptors, which would decode to tens of MB each,
// are counted on the wire and refused undecoded, a few at a time (the
// decode gate); with --grpc-max-recv-bytes lowered below their size, they
// are refused before they are read. Either way the process's peak RSS
// stays under 150 MB. Before these bounds, 16 such requests took 800-900
// MB and 32 over 2 GB.
func TestLargeRequestsKeepMemoryBounded(t *testing.T) {
	const (
		concurrent = 32
		size       = 1 << 20
		maxPeak    = 150 << 20
	)
	var req wiretest.Wire
	for len(req) < size-2 {
		req = req.Msg(2, nil) // an empty descriptor: two bytes
	}
	for _, tc := range []struct {
		name  string
		flags []string
		want  codes.Code
		says  string
	}{
		{"default limit", nil, codes.Internal, "more than 64 descriptors"},
		{"limit lowered", []string{"--grpc-max-recv-bytes", strconv.Itoa(64 << 10)}, codes.ResourceExhausted, "larger than max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tgproc.Start(t, binary, append([]string{"--policy", tgproc.PolicyFile(t, policy)}, tc.flags...)...)
			errs := make(chan error, concurrent)
			for range concurrent {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					errs <- wiretest.Invoke(ctx, p.Conn, wiretest.ShouldRateLimit, req, new(rlsv3.RateLimitResponse))
				}()
			}
			for range concurrent {
				err := <-errs
				if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.says) {
					t.Fatalf("a 1 MiB request of empty descriptors: %v, want %v saying %q", err, tc.want, tc.says)
				}
			}
			peak := p.Memory(t, "VmHWM")
			t.Logf("peak RSS %d MiB after %d concurrent %d-byte requests", peak>>20, concurrent, len(req))
			if peak > maxPeak {
				t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, maxPeak>>20)
			}
			if r := p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice")); r.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("an ordinary request after the large ones: %v", r)
			}
		})
	}
}
