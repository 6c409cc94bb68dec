package xds

// A real go-control-plane management server, as Envoy Gateway runs one:
// a SnapshotCache keyed by node id behind pkg/server/v3's ADS, on
// 127.0.0.1. Every request a client sends (subscriptions, ACKs, NACKs)
// goes to reqs.

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

const nodeID = "envoy-ratelimit" // Envoy Gateway's

type mgmt struct {
	addr  string
	cache cachev3.SnapshotCache
	reqs  chan *discovery.DiscoveryRequest
	srv   *grpc.Server
}

// startMgmt serves cache on addr ("127.0.0.1:0" for any port), with TLS
// when tc is not nil, until stop or the test's end.
func startMgmt(t *testing.T, addr string, cache cachev3.SnapshotCache, tc *tls.Config) *mgmt {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &mgmt{addr: l.Addr().String(), cache: cache, reqs: make(chan *discovery.DiscoveryRequest, 100)}
	var opts []grpc.ServerOption
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	m.srv = grpc.NewServer(opts...)
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		m.reqs <- proto.Clone(r).(*discovery.DiscoveryRequest)
		return nil
	}}
	discovery.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(ctx, cache, cb))
	go m.srv.Serve(l)
	t.Cleanup(func() { m.srv.Stop(); cancel() })
	return m
}

func (m *mgmt) stop() { m.srv.Stop() }

// set serves configs to nodeID as snapshot version.
func (m *mgmt) set(t *testing.T, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// next is the next request the server heard, within 10s.
func (m *mgmt) next(t *testing.T) *discovery.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-m.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the management server heard no request")
		return nil
	}
}

// reply is the next request that answers a response (an ACK or a NACK),
// skipping subscriptions.
func (m *mgmt) reply(t *testing.T) *discovery.DiscoveryRequest {
	t.Helper()
	for {
		if r := m.next(t); r.GetResponseNonce() != "" {
			return r
		}
	}
}

func newCache() cachev3.SnapshotCache {
	return cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
}

// perUser is a config of one domain limiting each user to rpu a minute.
func perUser(domain string, rpu uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name: fmt.Sprintf("default/eg/%s", domain), Domain: domain,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "user",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu, Name: "per-user"},
		}},
	}
}
