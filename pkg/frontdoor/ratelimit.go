package frontdoor

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/metrics"
)

// RateLimit wraps the ratelimit.v3 server so that its requests count as the
// "ratelimit" front door in tokengate_front_door_requests_total, next to
// ext_authz and forward_auth. It changes nothing else.
func (d *Doors) RateLimit(next rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceServer {
	c := d.counts[metrics.FrontDoorRateLimit]
	return rateLimit{next: next, ok: c[metrics.FrontDoorOK], over: c[metrics.FrontDoorOverLimit], bad: c[metrics.FrontDoorBadRequest]}
}

type rateLimit struct {
	rlsv3.UnimplementedRateLimitServiceServer
	next          rlsv3.RateLimitServiceServer
	ok, over, bad prometheus.Counter
}

func (r rateLimit) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.next.ShouldRateLimit(ctx, req)
	switch {
	case err != nil:
		r.bad.Inc()
	case resp.OverallCode == rlsv3.RateLimitResponse_OK:
		r.ok.Inc()
	default:
		r.over.Inc()
	}
	return resp, err
}
