package frontdoor

import (
	"context"
	"errors"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/metrics"
)

// ContextExtensionDomain is the ext_authz context extension that names the
// domain of a request (set per route in Envoy's ExtAuthzPerRoute).
const ContextExtensionDomain = "domain"

// The statuses of every answer: read-only, shared by all responses.
var (
	statusOK     = status.New(codes.OK, "").Proto()
	statusDenied = status.New(codes.PermissionDenied, "rate limited").Proto()
)

// lowerKey is the header name as HTTP/2 writes it, without an allocation
// for the names the front doors use.
func lowerKey(k string) string {
	switch k {
	case HeaderRateLimit:
		return "ratelimit"
	case HeaderRateLimitPolicy:
		return "ratelimit-policy"
	case HeaderXRateLimitLimit:
		return "x-ratelimit-limit"
	case HeaderXRateLimitRemain:
		return "x-ratelimit-remaining"
	case HeaderXRateLimitReset:
		return "x-ratelimit-reset"
	case "Retry-After":
		return "retry-after"
	case "X-Tokengate-Reason":
		return "x-tokengate-reason"
	case "X-Tokengate-Degraded":
		return "x-tokengate-degraded"
	}
	return strings.ToLower(k)
}

// ExtAuthz returns the envoy.service.auth.v3.Authorization server.
func (d *Doors) ExtAuthz() authv3.AuthorizationServer { return extAuthz{d: d} }

type extAuthz struct {
	authv3.UnimplementedAuthorizationServer
	d *Doors
}

// Check implements Authorization/Check. An allowed request gets status OK
// and the rate-limit headers in ok_response.response_headers_to_add (Envoy
// adds them to the response to the client); a denied one gets
// PERMISSION_DENIED and a denied_response with ExtAuthzDenyStatus, the
// headers and a problem+json body. An answer that limited or degraded a
// descriptor carries the service's dynamic_metadata (Envoy's ext_authz
// filter puts it under envoy.filters.http.ext_authz). A request the front door cannot decide
// (no front_doors.ext_authz section, a domain it does not serve) is a gRPC
// error, so that Envoy's failure_mode_allow and status_on_error apply.
func (e extAuthz) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	attrs := req.GetAttributes()
	httpReq := attrs.GetRequest().GetHttp()
	domain := attrs.GetContextExtensions()[ContextExtensionDomain]
	v := e.d.decide(ctx, metrics.FrontDoorExtAuthz, domain, func(fd *spec.Door) *spec.Attributes {
		hs := checkHeaders{httpReq}
		var xff []string
		if fd.TrustedProxyHops > 0 {
			if x, ok := hs.Header("x-forwarded-for"); ok {
				xff = []string{x}
			}
		}
		return &spec.Attributes{
			RemoteAddress: fd.ClientAddress(attrs.GetSource().GetAddress().GetSocketAddress().GetAddress(), xff),
			Method:        httpReq.GetMethod(),
			Path:          httpReq.GetPath(),
			Host:          httpReq.GetHost(),
			Scheme:        httpReq.GetScheme(),
			Headers:       hs,
		}
	})
	e.d.count(ctx, metrics.FrontDoorExtAuthz, &v)
	switch {
	case v.err == nil:
	case errors.Is(v.err, errNotConfigured):
		return nil, status.Error(codes.FailedPrecondition, v.err.Error())
	case status.Code(v.err) != codes.Unknown:
		return nil, v.err
	default:
		return nil, status.Error(codes.InvalidArgument, v.err.Error())
	}
	n := len(v.headers)
	if !v.allowed {
		n++ // content-type
	}
	options := make([]*corev3.HeaderValueOption, n)
	opts := make([]corev3.HeaderValueOption, n)
	values := make([]corev3.HeaderValue, n)
	for i, h := range v.headers {
		values[i] = corev3.HeaderValue{Key: lowerKey(h.key), Value: h.value}
		opts[i] = corev3.HeaderValueOption{Header: &values[i], AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
		options[i] = &opts[i]
	}
	if v.allowed {
		return &authv3.CheckResponse{
			Status:          statusOK,
			HttpResponse:    &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: options}},
			DynamicMetadata: v.metadata,
		}, nil
	}
	body, ctype := e.d.problem(e.d.opts.ExtAuthzDenyStatus, &v)
	values[n-1] = corev3.HeaderValue{Key: "content-type", Value: ctype}
	opts[n-1] = corev3.HeaderValueOption{Header: &values[n-1], AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	options[n-1] = &opts[n-1]
	return &authv3.CheckResponse{
		Status: statusDenied,
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.d.opts.ExtAuthzDenyStatus)},
			Headers: options,
			Body:    body,
		}},
		DynamicMetadata: v.metadata,
	}, nil
}

// checkHeaders reads a CheckRequest's headers: the headers map (lower-case
// keys, repeated headers joined by ","), or header_map when Envoy sends raw
// headers (encode_raw_headers).
type checkHeaders struct {
	r *authv3.AttributeContext_HttpRequest
}

func (h checkHeaders) Header(name string) (string, bool) {
	if v, ok := h.r.GetHeaders()[name]; ok {
		return v, true
	}
	for _, hv := range h.r.GetHeaderMap().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), name) {
			if hv.GetRawValue() != nil {
				return string(hv.GetRawValue()), true
			}
			return hv.GetValue(), true
		}
	}
	return "", false
}
