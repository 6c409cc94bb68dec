package main

// The policy from an xDS management server (--xds-*), and gRPC over TLS
// (--grpc-tls-*): both read certificate files through pkg/tlsfiles, which
// rereads them when they change.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/policy/watch"
	"github.com/tokengate/tokengate/pkg/policy/xds"
	"github.com/tokengate/tokengate/pkg/tlsfiles"
)

// xdsSettings are the --xds-* settings.
type xdsSettings struct {
	Server, NodeID, NodeMetadata          string
	CAFile, CertFile, KeyFile, ServerName string
	ForceStart                            bool
}

// grpcTLSSettings are the --grpc-tls-* settings.
type grpcTLSSettings struct {
	CertFile, KeyFile, ClientCAFile string
	RequireClientCert               bool
}

func (x xdsSettings) check(policyPath string) error {
	if x.Server == "" {
		// Not ignored in silence; --xds-force-start is left alone, as the
		// reference's FORCE_START_WITHOUT_INITIAL_CONFIG may be set for any
		// config type.
		for _, f := range []struct{ name, value string }{
			{"--xds-node-metadata", x.NodeMetadata}, {"--xds-ca-file", x.CAFile}, {"--xds-cert-file", x.CertFile},
			{"--xds-key-file", x.KeyFile}, {"--xds-server-name", x.ServerName},
		} {
			if f.value != "" {
				return fmt.Errorf("%s %q needs --xds-server", f.name, f.value)
			}
		}
		return nil
	}
	if policyPath != "" {
		return fmt.Errorf("--xds-server %q and --policy %q: the policy comes from one source, leave --policy empty", x.Server, policyPath)
	}
	if (x.CertFile == "") != (x.KeyFile == "") {
		return fmt.Errorf("--xds-cert-file and --xds-key-file go together")
	}
	_, err := x.metadata()
	return err
}

// metadata is --xds-node-metadata decoded.
func (x xdsSettings) metadata() (map[string]any, error) {
	if x.NodeMetadata == "" {
		return nil, nil
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(x.NodeMetadata), &md); err != nil || md == nil {
		return nil, fmt.Errorf("--xds-node-metadata %q: want a JSON object, such as {\"cluster\":\"edge\"}", x.NodeMetadata)
	}
	return md, nil
}

// tls is the client's TLS configuration: nil for plaintext.
func (x xdsSettings) tls(log *slog.Logger) (*tls.Config, error) {
	if x.CAFile == "" && x.CertFile == "" && x.ServerName == "" {
		return nil, nil
	}
	f, err := tlsfiles.Load(x.CertFile, x.KeyFile, x.CAFile, log)
	if err != nil {
		return nil, fmt.Errorf("--xds-*-file: %w", err)
	}
	return f.ClientConfig(x.ServerName), nil
}

func (g grpcTLSSettings) check() error {
	switch {
	case (g.CertFile == "") != (g.KeyFile == ""):
		return fmt.Errorf("--grpc-tls-cert-file and --grpc-tls-key-file go together")
	case g.ClientCAFile != "" && g.CertFile == "":
		return fmt.Errorf("--grpc-tls-client-ca-file needs --grpc-tls-cert-file and --grpc-tls-key-file")
	case g.RequireClientCert && g.ClientCAFile == "":
		return fmt.Errorf("--grpc-tls-require-client-cert needs --grpc-tls-client-ca-file")
	}
	return nil
}

// tls is the gRPC listener's TLS configuration: nil for plaintext.
func (g grpcTLSSettings) tls(log *slog.Logger) (*tls.Config, error) {
	if g.CertFile == "" {
		return nil, nil
	}
	f, err := tlsfiles.Load(g.CertFile, g.KeyFile, g.ClientCAFile, log)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-*-file: %w", err)
	}
	return f.ServerConfig(g.RequireClientCert), nil
}

// loadXDS subscribes to the xDS server of s and runs the subscription
// until ctx ends; policies go through one Publisher (watch) with the
// process's Compiler and are counted like a file's reloads.
func loadXDS(ctx context.Context, s settings, compiler *policy.Compiler, clk clock.Clock, m *metrics.Metrics, log *slog.Logger) (*xds.Client, error) {
	md, err := s.XDS.metadata()
	if err != nil {
		return nil, err
	}
	tc, err := s.XDS.tls(log)
	if err != nil {
		return nil, err
	}
	pub, err := watch.NewPublisher(watch.PublisherOptions{
		Source: xds.Source(s.XDS.Server), Clock: clk, Compiler: compiler, Logger: log,
		OnReload: func(r watch.Result, p *policy.Policy, err error) { reloaded(m, r, p, err) },
	})
	if err != nil {
		return nil, err
	}
	c, err := xds.New(xds.Options{
		Server: s.XDS.Server, NodeID: s.XDS.NodeID, NodeMetadata: md, TLS: tc,
		Publisher: pub, Logger: log, ForceStart: s.XDS.ForceStart,
	})
	if err != nil {
		return nil, err
	}
	log.Info("policy from an xDS server", slog.String(watch.SourceKey, pub.Source()), slog.String("node_id", s.XDS.NodeID),
		slog.Bool("tls", tc != nil), slog.Bool("force_start", s.XDS.ForceStart))
	go c.Run(ctx)
	return c, nil
}
