// Package frontdoor lets requests that arrive without descriptors share the
// policy, buckets and metrics of Envoy's ratelimit filter: Envoy's ext_authz
// filter (envoy.service.auth.v3.Authorization/Check on the gRPC port) and
// HTTP forward-auth (/v1/check on the HTTP port: Traefik ForwardAuth, Caddy
// forward_auth, ingress-nginx auth-url, nginx auth_request, HAProxy and
// oauth2-proxy style setups).
//
// Each request is described by spec.Attributes (client address, method,
// path, host, scheme, headers); the policy's front_doors section turns them
// into descriptors of one domain, and service.Decide decides them exactly
// as ShouldRateLimit would: one bucket store call, all or nothing. The
// answer carries the same facts as headers: RateLimit and RateLimit-Policy
// (draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit/Remaining/Reset
// (as Envoy's ratelimit filter writes them), and Retry-After when denied.
// Why a request can never pass (x-tokengate-reason, the problem's detail)
// and that the store failed (x-tokengate-degraded) name rules, costs and
// the store's state: they are told only when the service tells
// ShouldRateLimit's clients (service.Options.ClientReasonHeader), and are
// in the log and the dynamic metadata either way.
//
// Which domain: the front door's only domain, or the one the request names
// (ext_authz: the context extension "domain", set per route in Envoy;
// forward-auth: the query parameter ?domain=). A request naming no domain
// a front door serves is a bad request, not a free pass.
//
// Doors is safe for concurrent use.
package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
)

// Options configure Doors. Service, Policy and Metrics are required.
type Options struct {
	Service *service.Service
	// Policy returns the policy now serving; it is called once per request.
	Policy  func() *policy.Policy
	Metrics *metrics.FrontDoors
	// ExtAuthzDenyStatus is the HTTP status Envoy answers a denied request
	// with [429].
	ExtAuthzDenyStatus int
	// ForwardAuthDenyStatus is the status /v1/check denies with [429].
	// nginx's auth_request (ingress-nginx auth-url) accepts only 401 and
	// 403 as a denial and turns anything else into a 500.
	ForwardAuthDenyStatus int
	Logger                *slog.Logger // [slog.Default()]
	Clock                 clock.Clock  // [monotonic clock]; times the log's budget
}

// logPerSecond is the most lines a second of each of the front doors' logs:
// requests not decided (warn) and denials (debug). A client can send as
// many of either as it likes; past the budget lines are dropped, and the
// next line that goes out says how many in "dropped".
const logPerSecond = 10

// Doors serves the ext_authz and forward-auth front doors.
type Doors struct {
	opts              Options
	counts            map[string]map[string]prometheus.Counter // front door -> result
	undecided, denied *logbudget.Budget
	tell              bool // tell clients why (service.Service.ClientReasonHeader)
}

// New returns Doors.
func New(opts Options) (*Doors, error) {
	if opts.Service == nil || opts.Policy == nil || opts.Metrics == nil {
		return nil, errors.New("frontdoor: Service, Policy and Metrics are required")
	}
	for _, s := range []*int{&opts.ExtAuthzDenyStatus, &opts.ForwardAuthDenyStatus} {
		if *s == 0 {
			*s = http.StatusTooManyRequests
		}
		if *s < 400 || *s > 599 {
			return nil, fmt.Errorf("frontdoor: deny status %d: want 400 to 599", *s)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewMonotonic()
	}
	d := &Doors{
		opts: opts, counts: map[string]map[string]prometheus.Counter{},
		undecided: logbudget.New(logPerSecond, time.Second), denied: logbudget.New(logPerSecond, time.Second),
		tell: opts.Service.ClientReasonHeader(),
	}
	for _, fd := range []string{metrics.FrontDoorRateLimit, metrics.FrontDoorExtAuthz, metrics.FrontDoorForwardAuth} {
		d.counts[fd] = opts.Metrics.For(fd)
	}
	return d, nil
}

// verdict is one front-door decision.
type verdict struct {
	result   string // the metrics label
	allowed  bool
	domain   string
	headers  []header         // for the client, allowed or denied
	violated []string         // rules over their limit
	reason   string           // why the request can never pass as it is (the client's only if told)
	metadata *structpb.Struct // dynamic metadata: the service's, nil unless limited or degraded, or refusedMetadata
	err      error            // a bad request or a missing front door: no decision
}

type header struct{ key, value string }

// errNotConfigured is a front door the policy has no section for.
var errNotConfigured = errors.New("not configured")

// decide turns a request into descriptors and decides them. attrs builds
// the request's attributes once the front door (and so its trusted hops)
// is known.
func (d *Doors) decide(ctx context.Context, door, domain string, attrs func(*spec.Door) *spec.Attributes) verdict {
	fd := d.opts.Policy().FrontDoor(door)
	if fd == nil {
		return verdict{result: metrics.FrontDoorError, err: fmt.Errorf("%w: the policy has no front_doors.%s section", errNotConfigured, door)}
	}
	fdd := fd.Domain(domain)
	if fdd == nil {
		if domain == "" {
			return verdict{result: metrics.FrontDoorBadRequest, err: fmt.Errorf("front door %s serves several domains (%v): the request must name one", door, fd.Domains())}
		}
		return verdict{result: metrics.FrontDoorBadRequest, err: fmt.Errorf("front door %s does not serve domain %q (it serves %v)", door, logbudget.Clip(domain), fd.Domains())}
	}
	v := verdict{domain: fdd.Name}
	a := attrs(fd)
	a.Path = fd.Target(a.Path)
	// The descriptors and their entries live in a few arrays allocated
	// once, sized for every descriptor the domain can build.
	total := 0
	for _, ds := range fdd.Descriptors {
		total += len(ds.Actions)
	}
	descs := make([]*ratelimitv3.RateLimitDescriptor, 0, len(fdd.Descriptors))
	descArr := make([]ratelimitv3.RateLimitDescriptor, len(fdd.Descriptors))
	entryArr := make([]ratelimitv3.RateLimitDescriptor_Entry, total)
	entryPtrs := make([]*ratelimitv3.RateLimitDescriptor_Entry, total)
	entries := make([]spec.Entry, 0, total)
	for _, ds := range fdd.Descriptors {
		var missing string
		entries, missing = ds.Build(a, entries[:0])
		if missing != "" {
			continue
		}
		cost, hasCost, err := ds.HitsAddend(a)
		if err != nil {
			v.result, v.reason = metrics.FrontDoorRefused, err.Error()
			v.metadata = refusedMetadata(fdd.Name, v.reason)
			if d.tell {
				v.headers = []header{{"X-Tokengate-Reason", v.reason}}
			}
			return v
		}
		rd := &descArr[len(descs)]
		rd.Entries, entryPtrs = entryPtrs[:len(entries):len(entries)], entryPtrs[len(entries):]
		for i, e := range entries {
			entryArr[i].Key, entryArr[i].Value = e.Key, e.Value
			rd.Entries[i] = &entryArr[i]
		}
		entryArr = entryArr[len(entries):]
		if hasCost {
			rd.HitsAddend = wrapperspb.UInt64(cost)
		}
		descs = append(descs, rd)
	}
	if len(descs) == 0 {
		v.result, v.allowed = metrics.FrontDoorNoDescriptors, true
		return v
	}
	err := d.opts.Service.DecideFunc(ctx, fdd.Name, descs, 0, func(dec *service.Decision) {
		v.allowed = dec.Response.OverallCode == rlsv3.RateLimitResponse_OK
		v.result = metrics.FrontDoorOK
		if !v.allowed {
			v.result = metrics.FrontDoorOverLimit
		}
		v.headers, v.violated = rateLimitHeaders(dec)
		v.reason, v.metadata = dec.Reason, dec.Response.DynamicMetadata
	})
	if err != nil {
		return verdict{result: metrics.FrontDoorBadRequest, err: err}
	}
	return v
}

// refusedMetadata is the dynamic metadata of a request refused before
// it was decided, with the service's keys: where ext_authz says why when
// the client is not told.
func refusedMetadata(domain, reason string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		service.MetaDomain: structpb.NewStringValue(domain),
		service.MetaResult: structpb.NewStringValue(metrics.ResultRefused),
		service.MetaReason: structpb.NewStringValue(reason),
	}}
}

// count records a verdict in the metrics and, for what is not an ordinary
// decision, the log, at most logPerSecond lines a second of each kind.
// The client's values in a line are clipped where the error or reason is
// made (logbudget.Clip).
func (d *Doors) count(ctx context.Context, door string, v *verdict) {
	d.counts[door][v.result].Inc()
	switch {
	case v.err != nil:
		if dropped, ok := d.undecided.Take(d.opts.Clock.Now()); ok {
			d.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "front door request not decided",
				slog.String("front_door", door), slog.String("result", v.result), slog.String("error", v.err.Error()),
				logbudget.Dropped(dropped))
		}
	case !v.allowed && d.opts.Logger.Enabled(ctx, slog.LevelDebug):
		if dropped, ok := d.denied.Take(d.opts.Clock.Now()); ok {
			d.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "front door request denied",
				slog.String("front_door", door), slog.String("domain", v.domain), slog.String("result", v.result),
				slog.Any("rules", v.violated), slog.String("reason", v.reason), logbudget.Dropped(dropped))
		}
	}
}
