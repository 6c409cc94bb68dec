package metrics

import "github.com/prometheus/client_golang/prometheus"

// Front doors, the values of the "front_door" label.
const (
	FrontDoorRateLimit   = "ratelimit"    // Envoy's ratelimit filter: ShouldRateLimit
	FrontDoorExtAuthz    = "ext_authz"    // Envoy's ext_authz filter: Authorization/Check
	FrontDoorForwardAuth = "forward_auth" // HTTP forward-auth: /v1/check
)

// Front-door request results, the values of the "result" label of
// tokengate_front_door_requests_total.
const (
	FrontDoorOK            = "ok"             // allowed (and charged)
	FrontDoorOverLimit     = "over_limit"     // denied: a bucket could not cover its cost
	FrontDoorRefused       = "refused"        // denied before deciding: a cost header that is no number
	FrontDoorNoDescriptors = "no_descriptors" // allowed: no descriptor applied to the request
	FrontDoorBadRequest    = "bad_request"    // unknown or ambiguous domain, bad shape
	FrontDoorError         = "error"          // the policy has no section for this front door
)

// FrontDoorResults lists every result label value.
var FrontDoorResults = []string{FrontDoorOK, FrontDoorOverLimit, FrontDoorRefused, FrontDoorNoDescriptors, FrontDoorBadRequest, FrontDoorError}

// FrontDoors counts requests by the way they came in.
type FrontDoors struct {
	Requests *prometheus.CounterVec // front_door, result
}

// NewFrontDoors creates the front-door metrics and registers them on reg,
// with every (front_door, result) pair at zero so that rates exist from
// the start.
func NewFrontDoors(reg prometheus.Registerer) *FrontDoors {
	m := &FrontDoors{Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tokengate_front_door_requests_total",
		Help: "Requests by front door (ratelimit, ext_authz, forward_auth) and result.",
	}, []string{"front_door", "result"})}
	for _, fd := range []string{FrontDoorRateLimit, FrontDoorExtAuthz, FrontDoorForwardAuth} {
		for _, r := range FrontDoorResults {
			m.Requests.WithLabelValues(fd, r)
		}
	}
	reg.MustRegister(m.Requests)
	return m
}

// For returns the counters of one front door, by result.
func (m *FrontDoors) For(frontDoor string) map[string]prometheus.Counter {
	out := make(map[string]prometheus.Counter, len(FrontDoorResults))
	for _, r := range FrontDoorResults {
		out[r] = m.Requests.WithLabelValues(frontDoor, r)
	}
	return out
}
