// Package xdstest runs a real go-control-plane management server for
// tests, as Envoy Gateway runs one: a SnapshotCache keyed by node id
// behind pkg/server/v3's ADS, on loopback. Every request a client sends
// (subscriptions, ACKs, NACKs) is kept for the test to read (Next, Reply).
package xdstest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// NodeID is the node the configs are served to: Envoy Gateway's.
const NodeID = "envoy-ratelimit"

// Server is a management server.
type Server struct {
	Addr  string // host:port it listens on
	cache cachev3.SnapshotCache
	reqs  chan *discovery.DiscoveryRequest
	srv   *grpc.Server
}

// Start serves a new cache on addr ("127.0.0.1:0" for any port), with TLS
// when tc is not nil, until Stop or the test's end.
func Start(t *testing.T, addr string, tc *tls.Config) *Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	m := &Server{Addr: l.Addr().String(), cache: cache, reqs: make(chan *discovery.DiscoveryRequest, 1000)}
	var opts []grpc.ServerOption
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	m.srv = grpc.NewServer(opts...)
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		select {
		case m.reqs <- proto.Clone(r).(*discovery.DiscoveryRequest):
		default: // nobody reads them
		}
		return nil
	}}
	discovery.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(ctx, cache, cb))
	go m.srv.Serve(l)
	t.Cleanup(func() { m.srv.Stop(); cancel() })
	return m
}

// Stop stops serving: streams are cut, the address is free again.
func (m *Server) Stop() { m.srv.Stop() }

// Set serves configs to NodeID as snapshot version.
func (m *Server) Set(t *testing.T, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), NodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// Next is the next request the server heard, within 10s.
func (m *Server) Next(t *testing.T) *discovery.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-m.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the management server heard no request")
		return nil
	}
}

// Reply is the next request that answers a response (an ACK or a NACK),
// skipping subscriptions.
func (m *Server) Reply(t *testing.T) *discovery.DiscoveryRequest {
	t.Helper()
	for {
		if r := m.Next(t); r.GetResponseNonce() != "" {
			return r
		}
	}
}

// PerUser is a config of one domain limiting each user to rpu a minute.
func PerUser(domain string, rpu uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name: fmt.Sprintf("default/eg/%s", domain), Domain: domain,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "user",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu, Name: "per-user"},
		}},
	}
}
