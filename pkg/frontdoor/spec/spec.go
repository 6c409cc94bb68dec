package spec

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tokengate/tokengate/internal/logbudget"
)

// Front door names, the keys of the policy's front_doors section.
const (
	ExtAuthz    = "ext_authz"
	ForwardAuth = "forward_auth"
)

// Names are the front doors, in the order Policy.FrontDoors lists them.
var Names = []string{ExtAuthz, ForwardAuth}

// Door is how one front door turns requests into descriptors.
type Door struct {
	Name string
	Line int
	// TrustedProxyHops is how many proxies in front of the front door append
	// the address of their peer to X-Forwarded-For and are trusted to: the
	// client address is the one that many entries left of the direct peer
	// (0: the direct peer itself). See ClientAddress.
	TrustedProxyHops int
	// OriginalRequest says which headers describe the original request to
	// forward_auth; ext_authz has it in the CheckRequest.
	OriginalRequest OriginalRequest
	// DefaultDomain serves requests that name no domain; "" when the front
	// door has one domain (that one) or requires requests to name one.
	DefaultDomain string
	// NormalizePath is normalize_path (default true): descriptors read the
	// request's path normalised (see Target).
	NormalizePath bool
	domains       map[string]*Domain
	names         []string // in file order
}

// Domain is the descriptors a front door builds for one domain.
type Domain struct {
	Name        string
	Line        int
	Descriptors []*Descriptor
}

// Descriptor says how to build one descriptor from a request.
type Descriptor struct {
	Line    int
	Actions []Action
	// HitsAddendHeader, when not empty, is the lower-case name of a header
	// whose value is the descriptor's cost (its hits_addend).
	HitsAddendHeader string
}

// ActionKind is what an action reads from the request.
type ActionKind uint8

// The actions, after Envoy's route rate_limits actions.
const (
	ActionRemoteAddress ActionKind = iota + 1 // the client address (ClientAddress)
	ActionRequestHeader                       // a header's value
	ActionPath                                // the path, with or without the query
	ActionMethod                              // the method
	ActionHost                                // the host (authority)
	ActionScheme                              // http or https
	ActionGenericKey                          // a constant
)

var actionNames = map[ActionKind]string{
	ActionRemoteAddress: "remote_address",
	ActionRequestHeader: "request_headers",
	ActionPath:          "path",
	ActionMethod:        "method",
	ActionHost:          "host",
	ActionScheme:        "scheme",
	ActionGenericKey:    "generic_key",
}

func (k ActionKind) String() string { return actionNames[k] }

// Action makes one descriptor entry.
type Action struct {
	Kind ActionKind
	Line int
	// Key is the entry's key (descriptor_key).
	Key string
	// Header is the lower-case header name of a request_headers action.
	Header string
	// SkipIfAbsent: when the header is missing, leave this entry out rather
	// than skip the whole descriptor (request_headers only).
	SkipIfAbsent bool
	// StripQuery cuts the path at "?" (path only).
	StripQuery bool
	// StripTrailingSlash drops a final "/" from the path, but from "/"
	// itself (path only): for backends that serve /a/ as /a.
	StripTrailingSlash bool
	// Lowercase lower-cases the path, without its query, or the host (path
	// and host only): for backends that ignore the case of paths (all do
	// for hosts). The rules' path patterns must then be lower-case.
	Lowercase bool
	// Value is the constant of a generic_key action.
	Value string
}

// String describes the action as kind(options) -> descriptor_key, the
// way /debug/policy shows it: "request_headers(x-user-id, skip_if_absent)
// -> user_id", "path(strip_query) -> path".
func (a *Action) String() string {
	var opts []string
	switch a.Kind {
	case ActionRequestHeader:
		opts = append(opts, a.Header)
		if a.SkipIfAbsent {
			opts = append(opts, "skip_if_absent")
		}
	case ActionPath:
		for _, o := range []struct {
			on   bool
			name string
		}{{a.StripQuery, "strip_query"}, {a.StripTrailingSlash, "strip_trailing_slash"}, {a.Lowercase, "lowercase"}} {
			if o.on {
				opts = append(opts, o.name)
			}
		}
	case ActionHost:
		if a.Lowercase {
			opts = append(opts, "lowercase")
		}
	case ActionGenericKey:
		opts = append(opts, `"`+a.Value+`"`)
	}
	return a.Kind.String() + "(" + strings.Join(opts, ", ") + ") -> " + a.Key
}

// OriginalRequest names the headers a forward-auth request describes the
// original request with.
type OriginalRequest uint8

const (
	// OriginalUnset: not a forward-auth front door.
	OriginalUnset OriginalRequest = iota
	// OriginalXForwarded reads X-Forwarded-Method, X-Forwarded-Uri,
	// X-Forwarded-Host and X-Forwarded-Proto (Traefik, Caddy, HAProxy,
	// APISIX, nginx configured by hand).
	OriginalXForwarded
	// OriginalXOriginal reads X-Original-Method and X-Original-URL, or
	// X-Original-URI and the Host header (ingress-nginx, nginx auth_request).
	OriginalXOriginal
)

func (o OriginalRequest) String() string {
	switch o {
	case OriginalXForwarded:
		return "x-forwarded"
	case OriginalXOriginal:
		return "x-original"
	}
	return ""
}

// Domains returns the domains the front door serves, in file order.
func (d *Door) Domains() []string { return slices.Clone(d.names) }

// Domain returns what the front door builds for a domain. An empty name
// picks the default_domain, or the front door's only domain; it is nil when
// there is no such default or no domain by that name.
func (d *Door) Domain(name string) *Domain {
	if name == "" {
		name = d.DefaultDomain
	}
	if name == "" {
		if len(d.names) != 1 {
			return nil
		}
		name = d.names[0]
	}
	return d.domains[name]
}

// Attributes are what a front door knows of the original request.
type Attributes struct {
	// RemoteAddress is the client address (ClientAddress); "" if unknown.
	RemoteAddress string
	Method        string
	// Path is the request target, path and query: as the client sent it,
	// then as Door.Target makes it before descriptors are built.
	Path   string
	Host   string
	Scheme string
	// Headers are the request's headers.
	Headers HeaderSource
}

// HeaderSource looks up a request header; name is lower-case.
type HeaderSource interface {
	Header(name string) (value string, ok bool)
}

// Entry is one entry of a descriptor, the same as a policy.Entry: this
// package is imported by package policy and so cannot use its type.
type Entry struct {
	Key, Value string
}

// Build appends the descriptor's entries for a request to dst. missing is
// not empty when the descriptor must be skipped: it names what the request
// lacks ("header x-user-id", "the path"), and dst is returned unchanged.
func (d *Descriptor) Build(a *Attributes, dst []Entry) (entries []Entry, missing string) {
	start := len(dst)
	for i := range d.Actions {
		ac := &d.Actions[i]
		var v string
		switch ac.Kind {
		case ActionRemoteAddress:
			v, missing = a.RemoteAddress, "remote address"
		case ActionRequestHeader:
			var ok bool
			if a.Headers != nil {
				v, ok = a.Headers.Header(ac.Header)
			}
			if !ok {
				if ac.SkipIfAbsent {
					continue
				}
				return dst[:start], "header " + ac.Header
			}
			dst = append(dst, Entry{Key: ac.Key, Value: v})
			continue
		case ActionPath:
			v, missing = ac.path(a.Path), "path"
		case ActionMethod:
			v, missing = a.Method, "method"
		case ActionHost:
			v, missing = a.Host, "host"
			if ac.Lowercase {
				v = strings.ToLower(v)
			}
		case ActionScheme:
			v, missing = a.Scheme, "scheme"
		case ActionGenericKey:
			v, missing = ac.Value, ""
		}
		if v == "" && ac.Kind != ActionGenericKey {
			return dst[:start], missing
		}
		dst = append(dst, Entry{Key: ac.Key, Value: v})
	}
	if len(dst) == start {
		// Every entry was skip_if_absent and absent: Envoy sends nothing.
		return dst, "header it reads"
	}
	return dst, ""
}

// path is a path action's value for a request target.
func (ac *Action) path(target string) string {
	if ac.StripQuery {
		target, _, _ = strings.Cut(target, "?")
	}
	if !ac.StripTrailingSlash && !ac.Lowercase {
		return target
	}
	path, query, hasQuery := strings.Cut(target, "?")
	if ac.StripTrailingSlash && len(path) > 1 {
		if path = strings.TrimRight(path, "/"); path == "" {
			path = "/"
		}
	}
	if ac.Lowercase {
		path = strings.ToLower(path)
	}
	if !hasQuery {
		return path
	}
	return path + "?" + query
}

// HitsAddend reads the descriptor's cost from its hits_addend header. ok is
// false when the descriptor has no such header or the request lacks it (the
// rule's cost applies); err says why a value present is not a cost.
func (d *Descriptor) HitsAddend(a *Attributes) (cost uint64, ok bool, err error) {
	if d.HitsAddendHeader == "" || a.Headers == nil {
		return 0, false, nil
	}
	v, present := a.Headers.Header(d.HitsAddendHeader)
	if !present {
		return 0, false, nil
	}
	cost, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, false, &CostError{Header: d.HitsAddendHeader, Value: v}
	}
	return cost, true, nil
}

// keys are the descriptor keys the descriptor produces, in order, when
// every header is present.
func (d *Descriptor) keys() []string {
	keys := make([]string, len(d.Actions))
	for i, ac := range d.Actions {
		keys[i] = ac.Key
	}
	return keys
}

// CostError is a hits_addend header whose value is not a whole number.
type CostError struct{ Header, Value string }

func (e *CostError) Error() string {
	return "cost header " + e.Header + ": " + strconv.Quote(logbudget.Clip(e.Value)) + " is not a whole number"
}
