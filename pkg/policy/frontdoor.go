package policy

// Front doors. Envoy's ratelimit filter sends descriptors it built itself
// from the route's rate_limits actions. The other front doors (Envoy's
// ext_authz filter, and the HTTP forward-auth of Traefik, Caddy,
// ingress-nginx and others) send a description of the original request
// instead; the policy's front_doors section says, per front door and
// domain, how that request becomes descriptors, with actions modelled on
// Envoy's: remote_address, request_headers, path, method, host, scheme,
// generic_key, and a header as the descriptor's hits_addend. A descriptor
// one of whose actions finds nothing (a missing header) is skipped, as
// Envoy does.

import (
	"slices"
	"strconv"
	"strings"
)

// Front door names, the keys of the policy's front_doors section.
const (
	FrontDoorExtAuthz    = "ext_authz"
	FrontDoorForwardAuth = "forward_auth"
)

// FrontDoor is how one front door turns requests into descriptors.
type FrontDoor struct {
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
	domains       map[string]*FrontDoorDomain
	names         []string // in file order
}

// FrontDoorDomain is the descriptors a front door builds for one domain.
type FrontDoorDomain struct {
	Domain      string
	Line        int
	Descriptors []*DescriptorSpec
}

// DescriptorSpec says how to build one descriptor from a request.
type DescriptorSpec struct {
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
	// Value is the constant of a generic_key action.
	Value string
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

// FrontDoor returns the named front door, nil when the policy has none.
func (p *Policy) FrontDoor(name string) *FrontDoor { return p.frontDoors[name] }

// FrontDoors returns the front doors the policy configures, sorted by name.
func (p *Policy) FrontDoors() []*FrontDoor {
	out := make([]*FrontDoor, 0, len(p.frontDoors))
	for _, name := range []string{FrontDoorExtAuthz, FrontDoorForwardAuth} {
		if fd := p.frontDoors[name]; fd != nil {
			out = append(out, fd)
		}
	}
	return out
}

// Domains returns the domains the front door serves, in file order.
func (fd *FrontDoor) Domains() []string { return slices.Clone(fd.names) }

// Domain returns what the front door builds for a domain. An empty name
// picks the default_domain, or the front door's only domain; it is nil when
// there is no such default or no domain by that name.
func (fd *FrontDoor) Domain(name string) *FrontDoorDomain {
	if name == "" {
		name = fd.DefaultDomain
	}
	if name == "" {
		if len(fd.names) != 1 {
			return nil
		}
		name = fd.names[0]
	}
	return fd.domains[name]
}

// Attributes are what a front door knows of the original request.
type Attributes struct {
	// RemoteAddress is the client address (ClientAddress); "" if unknown.
	RemoteAddress string
	Method        string
	// Path is the request target: path and query, as the client sent it.
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

// Build appends the descriptor's entries for a request to dst. missing is
// not empty when the descriptor must be skipped: it names what the request
// lacks ("header x-user-id", "the path"), and dst is returned unchanged.
func (d *DescriptorSpec) Build(a *Attributes, dst []Entry) (entries []Entry, missing string) {
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
			v, missing = a.Path, "path"
			if ac.StripQuery {
				v, _, _ = strings.Cut(v, "?")
			}
		case ActionMethod:
			v, missing = a.Method, "method"
		case ActionHost:
			v, missing = a.Host, "host"
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

// HitsAddend reads the descriptor's cost from its hits_addend header. ok is
// false when the descriptor has no such header or the request lacks it (the
// rule's cost applies); err says why a value present is not a cost.
func (d *DescriptorSpec) HitsAddend(a *Attributes) (cost uint64, ok bool, err error) {
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

// CostError is a hits_addend header whose value is not a whole number.
type CostError struct{ Header, Value string }

func (e *CostError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return "cost header " + e.Header + ": " + strconv.Quote(v) + " is not a whole number"
}
