package xds

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/tlstest"
	"github.com/tokengate/tokengate/internal/xdstest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/policy/watch"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/tlsfiles"
)

// load is what the publisher's hook heard.
type load struct {
	result watch.Result
	p      *policy.Policy
	err    error
}

type subscriber struct {
	c     *Client
	loads chan load
	svc   *service.Service
}

// subscribe runs a client of addr, deciding through a service on a memory
// store, until the test ends.
func subscribe(t *testing.T, addr string, tc *tls.Config) *subscriber {
	t.Helper()
	clk := new(clock.Fake)
	s := &subscriber{loads: make(chan load, 10)}
	pub, err := watch.NewPublisher(watch.PublisherOptions{
		Source: Source(addr), Clock: clk, Compiler: new(policy.Compiler),
		OnReload: func(r watch.Result, p *policy.Policy, err error) { s.loads <- load{r, p, err} },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.c, err = New(Options{
		Server: addr, NodeID: xdstest.NodeID, NodeMetadata: map[string]any{"cluster": "edge", "zone": "a"}, TLS: tc,
		Publisher: pub, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.svc, err = service.New(service.Options{
		Policy: s.c.Current, Store: memory.New(memory.Options{MaxBuckets: 1000, Clock: clk}),
		StoreName: "memory", Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func (s *subscriber) next(t *testing.T) load {
	t.Helper()
	select {
	case l := <-s.loads:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no config was loaded or refused")
		return load{}
	}
}

// codes decides n requests of user in domain, one at a time.
func (s *subscriber) codes(t *testing.T, domain, user string, n int) string {
	t.Helper()
	var out []string
	for range n {
		resp, err := s.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain:      domain,
			Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

func TestSubscription(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set(t, "1", xdstest.PerUser("edge", 2, rlsconf.RateLimitUnit_MINUTE))
	s := subscribe(t, m.Addr, nil)

	// The subscription: the type, the node, no version yet.
	sub := m.Next(t)
	if sub.GetTypeUrl() != TypeURL || sub.GetNode().GetId() != xdstest.NodeID || sub.GetVersionInfo() != "" {
		t.Fatalf("subscription: type %q node %q version %q", sub.GetTypeUrl(), sub.GetNode().GetId(), sub.GetVersionInfo())
	}
	if z := sub.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); z != "a" {
		t.Errorf("node metadata zone = %q, want a", z)
	}

	// Initial config: loaded, ACKed, served.
	l := s.next(t)
	if l.result != watch.Success {
		t.Fatalf("initial config: %s %v", l.result, l.err)
	}
	if ack := m.Reply(t); ack.GetVersionInfo() != "1" || ack.GetErrorDetail() != nil {
		t.Fatalf("initial config: reply version %q error %v, want an ACK of 1", ack.GetVersionInfo(), ack.GetErrorDetail())
	}
	if err := s.c.Ready(); err != nil {
		t.Fatal(err)
	}
	if got := s.codes(t, "edge", "ann", 3); got != "OK OK OVER_LIMIT" {
		t.Fatalf("under version 1: %s", got)
	}
	v1 := l.p.Rules("edge")[0].Version

	// An update: versions brought forward as by a file reload.
	m.Set(t, "2", xdstest.PerUser("edge", 3, rlsconf.RateLimitUnit_MINUTE))
	l = s.next(t)
	if l.result != watch.Success {
		t.Fatalf("update: %s %v", l.result, l.err)
	}
	if ack := m.Reply(t); ack.GetVersionInfo() != "2" || ack.GetErrorDetail() != nil {
		t.Fatalf("update: reply version %q error %v, want an ACK of 2", ack.GetVersionInfo(), ack.GetErrorDetail())
	}
	v2 := l.p.Rules("edge")[0].Version
	if v2.Lineage() != v1.Lineage() || v2.ID <= v1.ID || v2.Prev().ID != v1.ID || v1.Lineage().Current() != v2 {
		t.Fatalf("update: version %d (previous %v) of lineage %p, want the next of %d on %p, published", v2.ID, v2.Prev(), v2.Lineage(), v1.ID, v1.Lineage())
	}
	if got := s.codes(t, "edge", "bob", 4); got != "OK OK OK OVER_LIMIT" {
		t.Fatalf("under version 2: %s", got)
	}

	// An invalid update: NACKed with the errors, the last good serves.
	again := xdstest.PerUser("edge", 1, rlsconf.RateLimitUnit_SECOND)
	again.Name = "default/eg/edge-again"
	m.Set(t, "3", xdstest.PerUser("edge", 3, rlsconf.RateLimitUnit_UNKNOWN), again)
	l = s.next(t)
	if l.result != watch.Failure || l.p != s.c.Current() || s.c.Current().Rules("edge")[0].Version != v2 {
		t.Fatalf("invalid update: %s, policy %p serving %p", l.result, l.p, s.c.Current())
	}
	nack := m.Reply(t)
	if nack.GetVersionInfo() != "2" || nack.GetErrorDetail() == nil {
		t.Fatalf("invalid update: reply version %q error %v, want a NACK keeping 2", nack.GetVersionInfo(), nack.GetErrorDetail())
	}
	for _, want := range []string{"xds:default/eg/edge:5:", `domain "edge"`, "invalid rate limit unit"} {
		if !strings.Contains(nack.GetErrorDetail().GetMessage(), want) {
			t.Errorf("NACK error_detail %q lacks %q", nack.GetErrorDetail().GetMessage(), want)
		}
	}
	if got := s.codes(t, "edge", "cat", 4); got != "OK OK OK OVER_LIMIT" {
		t.Fatalf("after the NACK: %s", got)
	}
	// The cache answers a NACK by sending the same version again: NACKed
	// again, after a backoff, and neither logged nor counted again.
	if again := m.Reply(t); again.GetErrorDetail().GetMessage() != nack.GetErrorDetail().GetMessage() || again.GetVersionInfo() != "2" {
		t.Fatalf("the resent version 3: reply version %q error %v", again.GetVersionInfo(), again.GetErrorDetail())
	}
	select {
	case l := <-s.loads:
		t.Fatalf("the resent version 3 was reported again: %s %v", l.result, l.err)
	default:
	}

	// The management server restarts on the same address with a new
	// snapshot: the client reconnects, resyncs and ACKs.
	m.Stop()
	m2 := xdstest.Start(t, m.Addr, nil)
	m2.Set(t, "1", xdstest.PerUser("edge", 5, rlsconf.RateLimitUnit_MINUTE), xdstest.PerUser("api", 1, rlsconf.RateLimitUnit_HOUR))
	l = s.next(t)
	if l.result != watch.Success || len(l.p.Domains()) != 2 {
		t.Fatalf("after the restart: %s %v", l.result, l.err)
	}
	if ack := m2.Reply(t); ack.GetVersionInfo() != "1" || ack.GetErrorDetail() != nil {
		t.Fatalf("after the restart: reply version %q error %v, want an ACK of 1", ack.GetVersionInfo(), ack.GetErrorDetail())
	}
	if v5 := l.p.Rules("edge")[0].Version; v5.Prev().ID != v2.ID {
		t.Errorf("after the restart: version %d follows %v, want %d", v5.ID, v5.Prev(), v2.ID)
	}
	if got := s.codes(t, "api", "dan", 2); got != "OK OVER_LIMIT" {
		t.Fatalf("after the restart: %s", got)
	}
}

// Before the first config the client serves no domain and is not ready.
func TestNotReadyBeforeFirstConfig(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	s := subscribe(t, m.Addr, nil)
	m.Next(t) // subscribed; nothing to send yet
	if s.c.Ready() == nil {
		t.Fatal("ready before any config")
	}
	if got := s.codes(t, "edge", "ann", 1); got != "OK" {
		t.Fatalf("before any config: %s", got)
	}
	m.Set(t, "1")
	if l := s.next(t); l.result != watch.Success || len(l.p.Domains()) != 0 {
		t.Fatalf("an empty snapshot: %s %v", l.result, l.err)
	}
	if err := s.c.Ready(); err != nil {
		t.Fatal(err)
	}
}

// mTLS to the management server: a server certificate of its CA, a
// client certificate the server requires.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := tlstest.NewCA(t, "server"), tlstest.NewCA(t, "client")
	srvPair, cliPair := serverCA.Server(t, dir, "mgmt", "localhost"), clientCA.Client(t, dir, "ratelimit")
	srvFiles, err := tlsfiles.Load(srvPair.CertFile, srvPair.KeyFile, clientCA.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := xdstest.Start(t, "127.0.0.1:0", srvFiles.ServerConfig(true))
	m.Set(t, "1", xdstest.PerUser("edge", 1, rlsconf.RateLimitUnit_MINUTE))

	cliFiles, err := tlsfiles.Load(cliPair.CertFile, cliPair.KeyFile, serverCA.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, m.Addr, cliFiles.ClientConfig("localhost"))
	if l := s.next(t); l.result != watch.Success {
		t.Fatalf("over mTLS: %s %v", l.result, l.err)
	}
	if got := s.codes(t, "edge", "ann", 2); got != "OK OVER_LIMIT" {
		t.Fatalf("over mTLS: %s", got)
	}
}

func TestForceStart(t *testing.T) {
	pub, err := watch.NewPublisher(watch.PublisherOptions{Source: Source("cp:18000"), Clock: new(clock.Fake)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Server: "cp:18000", Publisher: pub, ForceStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if p := c.Current(); p == nil || len(p.Domains()) != 0 {
		t.Fatalf("before any config: %v", p)
	}
}

// The reconnection wait doubles from BackoffMin to BackoffMax, each drawn
// in the upper half, whatever the attempt.
func TestBackoffBounded(t *testing.T) {
	c := &Client{opts: Options{BackoffMin: 100 * time.Millisecond, BackoffMax: 3 * time.Second}}
	for n := range 100 {
		d := min(c.opts.BackoffMin<<min(n, 5), c.opts.BackoffMax)
		for range 20 {
			if got := c.backoff(n); got < d/2 || got > d {
				t.Fatalf("attempt %d: waits %v, want within [%v, %v]", n, got, d/2, d)
			}
		}
	}
}
