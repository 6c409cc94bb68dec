package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

// serveLimited serves an empty policy on loopback ports with opts' limits
// until the test ends.
func serveLimited(t *testing.T, opts Options) *Server {
	t.Helper()
	p, err := new(policy.Compiler).Compile("policy.yaml", []byte("domains: {}\n"), nil, new(clock.Fake).Now())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.RateLimit, opts.Metrics, opts.Gatherer = rlsv3.UnimplementedRateLimitServiceServer{}, metrics.New(reg), reg
	opts.Policy, opts.Logger = func() *policy.Policy { return p }, slog.New(slog.DiscardHandler)
	return serve(t, opts)
}

func TestHTTPLimitsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  HTTPLimits
		want HTTPLimits
	}{
		{"zero", HTTPLimits{}, HTTPLimits{
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		}},
		{"one set", HTTPLimits{IdleTimeout: time.Second}, HTTPLimits{
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: time.Second, MaxHeaderBytes: 64 << 10,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := serveLimited(t, Options{HTTP: tc.set}).http
			got := HTTPLimits{h.ReadHeaderTimeout, h.ReadTimeout, h.WriteTimeout, h.IdleTimeout, h.MaxHeaderBytes}
			if got != tc.want {
				t.Fatalf("http.Server limits %+v, want %+v", got, tc.want)
			}
		})
	}
}

// closedWithin reads c (through r) until the server closes it, and fails
// the test if that takes longer than limit or the server sends anything.
func closedWithin(t *testing.T, limit time.Duration, c net.Conn, r io.Reader) time.Time {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	n, err := r.Read(make([]byte, 1))
	at := time.Now()
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the server kept the connection open for %v", limit)
	case n > 0 || !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset"):
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
	return at
}

// TestHTTPIdleKeepAliveClosed: a keep-alive connection that sends no next
// request is closed once IdleTimeout has passed, not before.
func TestHTTPIdleKeepAliveClosed(t *testing.T) {
	const idle = 200 * time.Millisecond
	srv := serveLimited(t, Options{HTTP: HTTPLimits{IdleTimeout: idle}})
	c, err := net.Dial("tcp", srv.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tokengate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answered := time.Now()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if waited := closedWithin(t, 5*time.Second, c, br).Sub(answered); waited < idle*3/4 {
		t.Fatalf("closed %v after the answer, before the idle timeout %v", waited, idle)
	}
}

// TestHTTPSlowHeadersCutOff: a client that trickles its headers, a byte at
// a time, is cut off once ReadHeaderTimeout has passed since it began
// (well before the 5 s default).
func TestHTTPSlowHeadersCutOff(t *testing.T) {
	const header = 200 * time.Millisecond
	srv := serveLimited(t, Options{HTTP: HTTPLimits{ReadHeaderTimeout: header}})
	c, err := net.Dial("tcp", srv.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tokengate\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, "a"); err != nil {
					return
				}
			}
		}
	}()
	closedWithin(t, 10*header, c, c)
	close(stop)
	<-trickled
}

// TestHTTPHeadersTooLarge: a header block above MaxHeaderBytes (and the
// 4 KiB net/http allows on top) is answered 431.
func TestHTTPHeadersTooLarge(t *testing.T) {
	srv := serveLimited(t, Options{HTTP: HTTPLimits{MaxHeaderBytes: 1 << 10}})
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr().String()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// TestGRPCIdleConnectionClosed: a gRPC connection with no RPC for
// GRPCMaxConnectionIdle is sent away (GOAWAY) and the client's channel
// goes idle; its next RPC connects again.
func TestGRPCIdleConnectionClosed(t *testing.T) {
	srv := serveLimited(t, Options{GRPCMaxConnectionIdle: 200 * time.Millisecond})
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(conn)
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for st := conn.GetState(); st != connectivity.Idle; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("the connection is still %v after 5s without an RPC", st)
		}
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("an RPC after the idle close: %v", err)
	}
}
