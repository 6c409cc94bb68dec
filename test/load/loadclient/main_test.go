package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// overHot answers OVER_LIMIT when a descriptor has the value hotValue and
// OK otherwise, without deciding anything.
type overHot struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (overHot) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetValue() == hotValue {
				return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
			}
		}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// serve starts overHot on a free loopback port and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, overHot{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestRunCounts(t *testing.T) {
	addr := serve(t)
	base := config{Addr: addr, Workers: 4, Conns: 2, Warmup: 50 * time.Millisecond,
		Duration: 250 * time.Millisecond, Grace: 5 * time.Second,
		Domain: "load", Key: "user_id", Descs: 1, Keys: 1000}
	for _, tc := range []struct {
		name   string
		edit   func(*config)
		wantOK bool // true: every call OK; false: every call OVER_LIMIT
	}{
		{"random keys", func(*config) {}, true},
		{"sequential keys, 3 descriptors", func(c *config) { c.Sequential, c.Descs = true, 3 }, true},
		{"hot key", func(c *config) { c.Hot = true }, false},
		{"paced", func(c *config) { c.Rate = 400 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			r, err := run(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK+r.OverLimit+r.Errors != r.Reqs || r.Latency.total != r.Reqs {
				t.Errorf("ok %d + over_limit %d + errors %d, latencies %d: want reqs %d",
					r.OK, r.OverLimit, r.Errors, r.Latency.total, r.Reqs)
			}
			if r.Errors != 0 {
				t.Errorf("errors %d (%v), want none", r.Errors, r.ByCode)
			}
			if r.Reqs == 0 || r.Window != c.Duration {
				t.Fatalf("reqs %d in %v: want calls in a window of %v", r.Reqs, r.Window, c.Duration)
			}
			if want := map[bool]uint64{true: r.OK, false: r.OverLimit}[tc.wantOK]; want != r.Reqs {
				t.Errorf("ok %d, over_limit %d of %d: want over_limit > 0 exactly when the hot key is sent",
					r.OK, r.OverLimit, r.Reqs)
			}
			if c.Rate > 0 {
				// 400/s over 250 ms is 100 calls; the timer's lateness
				// (about 1 ms) costs a few at most.
				if want := c.Rate * c.Duration.Seconds(); float64(r.Reqs) > want+float64(c.Workers) || float64(r.Reqs) < want/2 {
					t.Errorf("paced at %v/s: %d calls in %v", c.Rate, r.Reqs, c.Duration)
				}
			}
			var out strings.Builder
			if err := report(&out, r); err != nil {
				t.Fatal(err)
			}
			if line := out.String(); !strings.HasPrefix(line, "RESULT - rps=") || strings.Contains(line, "rps=0 ") {
				t.Errorf("report: %q, want a RESULT line with rps > 0", line)
			}
		})
	}
}

func TestRunRefusesOtherHosts(t *testing.T) {
	for _, addr := range []string{"10.0.0.1:8081", "localhost:8081", "0.0.0.0:8081", "[::ffff:127.0.0.1]:8081",
		"example.com:443", "127.0.0.2:8081", "127.0.0.1", "127.0.0.1:0", "dns:///127.0.0.1:8081"} {
		t.Run(addr, func(t *testing.T) {
			c := config{Addr: addr, Workers: 1, Conns: 1, Duration: time.Millisecond, Grace: time.Second,
				Domain: "load", Key: "user_id", Descs: 1, Keys: 1}
			if _, err := run(t.Context(), c); err == nil {
				t.Errorf("run accepted %q", addr)
			}
		})
	}
	for _, addr := range []string{"127.0.0.1:8081", "[::1]:8081"} {
		if err := checkLoopback(addr); err != nil {
			t.Errorf("checkLoopback(%q): %v", addr, err)
		}
	}
}

func TestRunFailsWithoutServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // a port nothing listens on
	c := config{Addr: addr, Workers: 1, Conns: 1, Duration: time.Millisecond, Grace: 200 * time.Millisecond,
		Domain: "load", Key: "user_id", Descs: 1, Keys: 1}
	if _, err := run(t.Context(), c); err == nil || !strings.Contains(err.Error(), "first call") {
		t.Errorf("run without a server: %v, want the probe's error", err)
	}
}
