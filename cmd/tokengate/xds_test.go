package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/xdstest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy/watch"
)

// TestXDSAndTLSSettingsCheck: settings that cannot do what they say stop
// the start, naming the flags.
func TestXDSAndTLSSettingsCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" accepted
	}{
		{[]string{"--xds-server", "cp:18000", "--xds-node-id", "envoy-ratelimit", "--xds-node-metadata", `{"zone":"a"}`, "--xds-force-start"}, ""},
		{[]string{"--xds-server", "cp:18000", "--policy", "p.yaml"}, "leave --policy empty"},
		{[]string{"--xds-server", "cp:18000", "--xds-node-metadata", "zone=a"}, "--xds-node-metadata \"zone=a\": want a JSON object"},
		{[]string{"--xds-server", "cp:18000", "--xds-node-metadata", "[1]"}, "want a JSON object"},
		{[]string{"--xds-server", "cp:18000", "--xds-cert-file", "c.pem"}, "--xds-cert-file and --xds-key-file go together"},
		{[]string{"--xds-ca-file", "ca.pem"}, "--xds-ca-file \"ca.pem\" needs --xds-server"},
		{[]string{"--xds-force-start"}, ""},
		{[]string{"--grpc-tls-cert-file", "c.pem", "--grpc-tls-key-file", "k.pem", "--grpc-tls-client-ca-file", "ca.pem", "--grpc-tls-require-client-cert"}, ""},
		{[]string{"--grpc-tls-cert-file", "c.pem"}, "--grpc-tls-cert-file and --grpc-tls-key-file go together"},
		{[]string{"--grpc-tls-client-ca-file", "ca.pem"}, "needs --grpc-tls-cert-file"},
		{[]string{"--grpc-tls-cert-file", "c.pem", "--grpc-tls-key-file", "k.pem", "--grpc-tls-require-client-cert"}, "needs --grpc-tls-client-ca-file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := loadSettings(tc.args)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestXDSPolicySourceKey: a policy from an xDS server is logged under
// policy_source xds://host:port, like a file's under its path, and counted
// as a reload.
func TestXDSPolicySourceKey(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set(t, "1", xdstest.PerUser("edge", 1, rlsconf.RateLimitUnit_MINUTE))
	tap := newLogTap()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	src, err := loadPolicy(ctx, settings{XDS: xdsSettings{Server: m.Addr, NodeID: xdstest.NodeID}}, clock.NewMonotonic(), metrics.New(reg), slog.New(tap))
	if err != nil {
		t.Fatal(err)
	}
	tap.waitFor(t, "policy loaded")
	if got := attrOf(tap.lines("policy loaded"), watch.SourceKey); got != "xds://"+m.Addr {
		t.Errorf("%s=%q", watch.SourceKey, got)
	}
	if err := src.ready(); err != nil || src.file != nil || src.current().Rules("edge") == nil {
		t.Errorf("ready %v, file %v, domains %v", err, src.file, src.current().Domains())
	}
}
