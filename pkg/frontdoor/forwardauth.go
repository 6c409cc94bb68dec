package frontdoor

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/metrics"
)

// ForwardAuthPath is where the HTTP port answers forward-auth requests.
const ForwardAuthPath = "/v1/check"

// ForwardAuth returns the forward-auth handler (any method): 200 with the
// rate-limit headers when allowed; ForwardAuthDenyStatus with the headers,
// Retry-After and a problem+json body when denied; 400 for a domain the
// front door does not serve (?domain=); 500 when the policy has no
// front_doors.forward_auth section. The original request is read from the
// headers the policy's original_request names (see attributes).
func (d *Doors) ForwardAuth() http.Handler { return forwardAuth{d: d} }

type forwardAuth struct{ d *Doors }

func (f forwardAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	domain := ""
	if r.URL.RawQuery != "" {
		domain = r.URL.Query().Get("domain")
	}
	v := f.d.decide(ctx, metrics.FrontDoorForwardAuth, domain, func(fd *spec.Door) *spec.Attributes {
		return attributes(fd, r)
	})
	f.d.count(ctx, metrics.FrontDoorForwardAuth, &v)
	if v.err != nil {
		code := http.StatusBadRequest
		if errors.Is(v.err, errNotConfigured) {
			code = http.StatusInternalServerError
		}
		http.Error(w, "tokengate: "+v.err.Error(), code)
		return
	}
	h := w.Header()
	for _, hv := range v.headers {
		h.Set(hv.key, hv.value)
	}
	h.Set("Cache-Control", "no-store")
	if v.allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	body, ctype := f.d.problem(f.d.opts.ForwardAuthDenyStatus, &v)
	h.Set("Content-Type", ctype)
	w.WriteHeader(f.d.opts.ForwardAuthDenyStatus)
	if r.Method != http.MethodHead {
		w.Write([]byte(body))
	}
}

// attributes reads the original request from a forward-auth request.
//
// The client address is fd.ClientAddress of the connection's peer (the
// ingress) and X-Forwarded-For. The rest comes from the headers that
// original_request names, and only from them: the other kind are whatever
// the client sent, since ingresses pass unknown headers through.
//
//   - x-forwarded: X-Forwarded-Method, X-Forwarded-Uri (path and query),
//     X-Forwarded-Host, X-Forwarded-Proto (Traefik, Caddy, HAProxy).
//   - x-original: X-Original-Method, and X-Original-URL
//     (scheme://host/path?query, ingress-nginx) or else X-Original-URI with
//     the Host header and X-Scheme (nginx auth_request set up by hand).
func attributes(fd *spec.Door, r *http.Request) *spec.Attributes {
	h := r.Header
	a := &spec.Attributes{Headers: httpHeaders(h)}
	var xff []string
	if fd.TrustedProxyHops > 0 {
		xff = h.Values("X-Forwarded-For")
	}
	a.RemoteAddress = fd.ClientAddress(r.RemoteAddr, xff)
	switch fd.OriginalRequest {
	case spec.OriginalXForwarded:
		a.Method, a.Path = h.Get("X-Forwarded-Method"), h.Get("X-Forwarded-Uri")
		a.Host, a.Scheme = h.Get("X-Forwarded-Host"), h.Get("X-Forwarded-Proto")
	case spec.OriginalXOriginal:
		a.Method = h.Get("X-Original-Method")
		if u := h.Get("X-Original-URL"); u != "" {
			a.Scheme, a.Host, a.Path = splitURL(u)
		} else {
			a.Path, a.Host, a.Scheme = h.Get("X-Original-URI"), r.Host, h.Get("X-Scheme")
		}
	}
	return a
}

// splitURL cuts an absolute URL into scheme, host and request target
// without decoding or re-encoding anything.
func splitURL(u string) (scheme, host, target string) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return "", "", u
	}
	i := strings.IndexAny(rest, "/?")
	if i < 0 {
		return scheme, rest, "/"
	}
	target = rest[i:]
	if target[0] == '?' {
		target = "/" + target
	}
	return scheme, rest[:i], target
}

// httpHeaders reads the first value of a header.
type httpHeaders http.Header

func (h httpHeaders) Header(name string) (string, bool) {
	vs := http.Header(h).Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// problem is the body of a denial: an RFC 9457 problem, of the
// quota-exceeded type the RateLimit header draft defines, with the rules
// over their limit (as RateLimit-Policy names them) and, when clients are
// told why, the reason as its detail.
func (d *Doors) problem(code int, v *verdict) (body, contentType string) {
	detail := ""
	if d.tell {
		detail = v.reason
	}
	p := struct {
		Type             string   `json:"type"`
		Title            string   `json:"title"`
		Status           int      `json:"status"`
		Detail           string   `json:"detail,omitempty"`
		ViolatedPolicies []string `json:"violated-policies,omitempty"`
	}{problemQuotaExceededType, "Request cannot be satisfied as assigned quota has been exceeded", code, detail, v.violated}
	b, _ := json.Marshal(p)
	return string(b) + "\n", "application/problem+json"
}
