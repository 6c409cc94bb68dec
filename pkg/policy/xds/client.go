package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/policy/watch"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults of Options.
const (
	DefaultBackoffMin = 500 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
)

// A stream quiet for keepaliveTime is pinged, and given up when the ping is
// not answered within keepaliveTimeout (a server gone without a FIN: its
// node lost). No sooner: a gRPC server by default sends a client that
// pings more often than every 5 minutes away (GOAWAY too_many_pings), and
// Envoy Gateway's keeps that default.
const (
	keepaliveTime    = 5*time.Minute + 30*time.Second
	keepaliveTimeout = 20 * time.Second
)

// Options configure a Client.
type Options struct {
	// Server is the management server's host:port.
	Server string
	// NodeID and NodeMetadata identify this client to the server, which
	// picks the snapshot by them (Envoy Gateway: node id
	// "envoy-ratelimit").
	NodeID       string
	NodeMetadata map[string]any
	// TLS, when not nil, is the client's TLS configuration (with
	// certificates for mTLS); nil connects in plaintext.
	TLS *tls.Config
	// Publisher compiles and serves every config received: the process's
	// one Clock and Compiler (watch.PublisherOptions), its Source naming
	// the server (Source).
	Publisher *watch.Publisher
	// Logger receives connections, losses and NACKs; nil discards them.
	Logger *slog.Logger
	// BackoffMin and BackoffMax bound the wait before reconnecting after
	// a lost stream: it doubles from BackoffMin to BackoffMax, each wait
	// drawn in [d/2, d), and starts again from BackoffMin once a stream
	// has delivered a response [DefaultBackoffMin, DefaultBackoffMax].
	BackoffMin, BackoffMax time.Duration
	// ForceStart makes Ready true before the first config, as the
	// reference's FORCE_START_WITHOUT_INITIAL_CONFIG: until it arrives no
	// domain is configured and every request is answered OK.
	ForceStart bool
}

// Source is the policy source name of a management server, for
// watch.PublisherOptions.Source: "xds://host:port".
func Source(server string) string { return "xds://" + server }

// Client subscribes to the management server's RateLimitConfigs.
type Client struct {
	opts  Options
	conn  *grpc.ClientConn
	node  *corev3.Node
	empty *policy.Policy // Current before the first config
	acked atomic.Pointer[string]
}

// New checks opts and prepares the connection; nothing is dialled until
// Run.
func New(opts Options) (*Client, error) {
	if opts.Server == "" || opts.Publisher == nil {
		return nil, errors.New("xds: Options.Server and Options.Publisher are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(DefaultBackoffMax, opts.BackoffMin)
	}
	md, err := structpb.NewStruct(opts.NodeMetadata)
	if err != nil {
		return nil, fmt.Errorf("xds: node metadata: %w", err)
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	conn, err := grpc.NewClient(opts.Server, grpc.WithTransportCredentials(creds), grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: false,
	}))
	if err != nil {
		return nil, fmt.Errorf("xds: management server %q: %w", opts.Server, err)
	}
	empty, err := policy.ParseFiles(noResources.Name, []policy.File{noResources})
	if err != nil {
		return nil, err
	}
	return &Client{opts: opts, conn: conn, node: &corev3.Node{Id: opts.NodeID, Metadata: md}, empty: empty}, nil
}

// Current is the policy serving: the last good config's, or before the
// first one a policy without domains. Never nil; safe for concurrent use.
func (c *Client) Current() *policy.Policy {
	if p := c.opts.Publisher.Current(); p != nil {
		return p
	}
	return c.empty
}

// Ready is nil once a config has been applied (or with ForceStart), else
// why not.
func (c *Client) Ready() error {
	if c.opts.ForceStart || c.opts.Publisher.Current() != nil {
		return nil
	}
	return fmt.Errorf("no rate limit config received yet from %s", c.opts.Server)
}

// AckedVersion is the version_info last ACKed, "" before the first.
func (c *Client) AckedVersion() string {
	if v := c.acked.Load(); v != nil {
		return *v
	}
	return ""
}

// Run keeps a stream to the management server open until ctx ends,
// reconnecting with backoff, and closes the connection when it returns.
// Call it once.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	attempt := 0
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			attempt = 0
		}
		wait := c.backoff(attempt)
		attempt++
		c.opts.Logger.Warn("xDS stream lost; reconnecting", watch.SourceKey, c.opts.Publisher.Source(),
			"err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// backoff is the wait before reconnection attempt n (from 0): BackoffMin
// doubled n times, at most BackoffMax, jittered down by up to half.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.BackoffMin
	for i := 0; i < n && d < c.opts.BackoffMax; i++ {
		d *= 2 // below BackoffMax: no overflow
	}
	d = min(d, c.opts.BackoffMax)
	return d/2 + rand.N(d/2+1)
}

// stream runs one ADS stream: it subscribes, then applies each response
// and ACKs or NACKs it, until the stream fails. got reports whether any
// response arrived.
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// No version on a new stream: the server sends its whole state, which
	// resyncs after a restart of either side (content already serving is
	// recognised by its hash and only ACKed).
	if err := s.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL}); err != nil {
		return false, err
	}
	c.opts.Logger.Info("xDS stream open", watch.SourceKey, c.opts.Publisher.Source(), "node_id", c.node.GetId())
	var refused refusal
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		got = true
		req := &discovery.DiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce(), VersionInfo: c.AckedVersion()}
		key := responseKey(resp)
		if key == refused.key {
			err = c.again(ctx, &refused)
		} else if err = c.apply(resp); err != nil {
			refused = refusal{key: key, err: err}
			c.opts.Logger.Warn("xDS config NACKed", watch.SourceKey, c.opts.Publisher.Source(),
				"version", resp.GetVersionInfo(), "acked_version", req.VersionInfo)
		} else {
			refused = refusal{}
		}
		if err != nil {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: policy.Brief(err)}
		} else {
			v := resp.GetVersionInfo()
			c.acked.Store(&v)
			req.VersionInfo = v
		}
		if err := s.Send(req); err != nil {
			return got, err
		}
	}
}

// maxRenack is the longest a NACK of a response already NACKed waits.
const maxRenack = 10 * time.Second

// refusal is the response last NACKed on a stream (responseKey) and why.
type refusal struct {
	key     string
	err     error
	repeats int
}

// again is the error of a response NACKed before: a server answers a NACK
// by sending its state again (go-control-plane's cache does), and NACKing
// at once would spin both sides. It waits a backoff (at most maxRenack)
// first, and logs and counts nothing more.
func (c *Client) again(ctx context.Context, r *refusal) error {
	t := time.NewTimer(min(c.backoff(r.repeats), maxRenack))
	defer t.Stop()
	r.repeats++
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return r.err
}

// responseKey identifies a response's version and content, whatever the
// order of its resources (go-control-plane's cache sends them in map
// order).
func responseKey(resp *discovery.DiscoveryResponse) string {
	sums := make([]string, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		sum := sha256.Sum256(a.GetValue())
		sums = append(sums, a.GetTypeUrl()+"\x00"+hex.EncodeToString(sum[:]))
	}
	slices.Sort(sums)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", resp.GetVersionInfo(), resp.GetTypeUrl(), strings.Join(sums, "\x00"))
	return hex.EncodeToString(h.Sum(nil))
}

// apply decodes a response's RateLimitConfigs and publishes them as one
// policy; the error says why they were refused.
func (c *Client) apply(resp *discovery.DiscoveryResponse) error {
	pub := c.opts.Publisher
	if resp.GetTypeUrl() != TypeURL {
		err := fmt.Errorf("version %s: type %q, want %q", resp.GetVersionInfo(), resp.GetTypeUrl(), TypeURL)
		pub.Refuse(err)
		return err
	}
	files := make([]policy.File, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		var cfg rlsconf.RateLimitConfig
		err := a.UnmarshalTo(&cfg)
		var f policy.File
		if err == nil {
			f, err = File(&cfg)
		}
		if err != nil {
			err = fmt.Errorf("version %s: resource %d: %w", resp.GetVersionInfo(), i, err)
			pub.Refuse(err)
			return err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		files = append(files, noResources)
	}
	// In name order, so that one set sent in another order is the same
	// policy (the same SHA-256).
	slices.SortStableFunc(files, func(a, b policy.File) int { return strings.Compare(a.Name, b.Name) })
	sum := policy.FilesSHA256(pub.Source(), files)
	if cur := pub.Current(); cur != nil && cur.SHA256() == hex.EncodeToString(sum[:]) {
		return nil // a resync of what serves
	}
	_, err := pub.Apply(pub.Source(), files)
	return err
}
