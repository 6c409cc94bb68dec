// Package redis tests tokengate --store redis from the outside: the built
// binary, real redis-server processes (single node and a three-master
// cluster, internal/redistest) and a real gRPC client, all on 127.0.0.1.
package redis

import (
	"os"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/tgproc"
)

var binary string

func TestMain(m *testing.M) { os.Exit(tgproc.Main(m, &binary, false)) }

type proc struct{ *tgproc.Proc }

// start runs tokengate with flags on free loopback ports until the test
// ends.
func start(t *testing.T, flags ...string) *proc { return &proc{tgproc.Start(t, binary, flags...)} }

// ask calls ShouldRateLimit in domain edge.
func (p *proc) ask(t *testing.T, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return p.Ask(t, "edge", 0, ds...)
}

var (
	descriptor = tgproc.Descriptor
	header     = tgproc.Header
	degraded   = tgproc.Degraded
	writeFile  = tgproc.PolicyFile
)
