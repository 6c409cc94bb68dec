package blackbox

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/internal/tlstest"
	"github.com/tokengate/tokengate/internal/xdstest"
	"github.com/tokengate/tokengate/pkg/tlsfiles"
)

func answers(t *testing.T, ask func() *rlsv3.RateLimitResponse, n int) string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, ask().GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

// The policy from an xDS server: not ready until the first config, then
// served and counted as a reload; a bad update is NACKed and counted as a
// failed one while the last good config serves.
func TestXDSPolicySource(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	p := start(t, "--xds-server", m.Addr, "--xds-node-id", xdstest.NodeID, "--xds-node-metadata", `{"zone":"a"}`)
	tgproc.WaitHealth(t, p.Conn, "", healthpb.HealthCheckResponse_NOT_SERVING)
	if code, _ := p.Get(t, "/readyz"); code != 503 {
		t.Errorf("/readyz before the first config: %d", code)
	}

	m.Set(t, "1", xdstest.PerUser("edge", 2, rlsconf.RateLimitUnit_MINUTE))
	tgproc.WaitHealth(t, p.Conn, "", healthpb.HealthCheckResponse_SERVING)
	ask := func() *rlsv3.RateLimitResponse { return p.Ask(t, "edge", 0, tgproc.Descriptor("user", "ann")) }
	if got := answers(t, ask, 3); got != "OK OK OVER_LIMIT" {
		t.Fatalf("under version 1: %s", got)
	}
	if v := p.Metric(t, `tokengate_policy_reloads_total{result="success"}`); v != "1" {
		t.Errorf("reloads: %q", v)
	}

	m.Set(t, "2", xdstest.PerUser("edge", 2, rlsconf.RateLimitUnit_UNKNOWN))
	for {
		if r := m.Reply(t); r.GetErrorDetail() != nil {
			break
		}
	}
	if v := p.Metric(t, `tokengate_policy_reload_failures_total{reason="invalid"}`); v != "1" {
		t.Errorf("failed reloads: %q", v)
	}
	if got := answers(t, ask, 1); got != "OVER_LIMIT" {
		t.Fatalf("after the NACK: %s", got)
	}
}

// gRPC over mTLS, from the --grpc-tls-* flags.
func TestGRPCMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := tlstest.NewCA(t, "server"), tlstest.NewCA(t, "client")
	srv, cli := serverCA.Server(t, dir, "tokengate", "localhost"), clientCA.Client(t, dir, "envoy")
	p := start(t, "--grpc-tls-cert-file", srv.CertFile, "--grpc-tls-key-file", srv.KeyFile,
		"--grpc-tls-client-ca-file", clientCA.CAFile, "--grpc-tls-require-client-cert")
	files, err := tlsfiles.Load(cli.CertFile, cli.KeyFile, serverCA.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{
		"with a client certificate":    files.ClientConfig("localhost"),
		"without a client certificate": {RootCAs: files.Pool(), ServerName: "localhost"},
	} {
		conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{tgproc.Descriptor("user", "ann")}})
		cancel()
		conn.Close()
		if want := name == "with a client certificate"; (err == nil) != want {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := p.RLS.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"}); err == nil {
		t.Error("plaintext was served")
	}
}
