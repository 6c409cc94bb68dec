package policy

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on a front door, the same as on a ratelimit request (see
// package service): a descriptor list must fit one store call.
const (
	MaxFrontDoorDescriptors = 64
	MaxFrontDoorActions     = 32
	maxDescriptorKeyBytes   = 256
	// MaxTrustedProxyHops bounds trusted_proxy_hops; more is a typo.
	MaxTrustedProxyHops = 16
)

var (
	frontDoorNames   = []string{FrontDoorExtAuthz, FrontDoorForwardAuth}
	frontDoorFields  = []string{"trusted_proxy_hops", "original_request", "default_domain", "domains"}
	descriptorFields = []string{"actions", "hits_addend"}
	hitsAddendFields = []string{"request_header"}
	actionFields     = map[string][]string{
		"remote_address":  {"descriptor_key"},
		"request_headers": {"header_name", "descriptor_key", "skip_if_absent"},
		"path":            {"descriptor_key", "strip_query"},
		"method":          {"descriptor_key"},
		"host":            {"descriptor_key"},
		"scheme":          {"descriptor_key"},
		"generic_key":     {"descriptor_value", "descriptor_key"},
	}
	actionKinds = map[string]ActionKind{
		"remote_address": ActionRemoteAddress, "request_headers": ActionRequestHeader, "path": ActionPath,
		"method": ActionMethod, "host": ActionHost, "scheme": ActionScheme, "generic_key": ActionGenericKey,
	}
	actionOrder = []string{"remote_address", "request_headers", "path", "method", "host", "scheme", "generic_key"}
)

// frontDoors reads the front_doors section; p's domains are read already.
func (r *reader) frontDoors(n *yaml.Node, p *Policy) {
	f := r.fields(n, at{}, "front_doors", frontDoorNames)
	if f == nil {
		return
	}
	p.frontDoors = make(map[string]*FrontDoor, len(f))
	for _, name := range frontDoorNames {
		if v := f[name]; v != nil {
			if fd := r.frontDoor(name, v, p); fd != nil {
				p.frontDoors[name] = fd
			}
		}
	}
}

func (r *reader) frontDoor(name string, n *yaml.Node, p *Policy) *FrontDoor {
	path := "front_doors." + name
	f := r.fields(n, at{}, path, frontDoorFields)
	if f == nil {
		return nil
	}
	fd := &FrontDoor{Name: name, Line: n.Line, domains: map[string]*FrontDoorDomain{}}
	if v := f["trusted_proxy_hops"]; v != nil {
		hops, err := integer(v)
		if err == nil && (hops < 0 || hops > MaxTrustedProxyHops) {
			err = fmt.Errorf("%d: want 0 (use the direct peer) to %d", hops, MaxTrustedProxyHops)
		}
		if err != nil {
			r.fail(v, at{}, path+".trusted_proxy_hops", err)
		}
		fd.TrustedProxyHops = int(hops)
	}
	v := f["original_request"]
	switch {
	case name != FrontDoorForwardAuth && v != nil:
		r.fail(v, at{}, path+".original_request", errors.New("only forward_auth has it: ext_authz reads the original request from the CheckRequest"))
	case name == FrontDoorForwardAuth && v == nil:
		r.fail(n, at{}, path+".original_request", errors.New("missing: say which headers describe the original request, "+
			"x-forwarded (Traefik, Caddy, HAProxy: X-Forwarded-Method/Uri/Host/Proto) or x-original (ingress-nginx: X-Original-Method/URL); "+
			"headers of the other kind are the client's own and are ignored"))
	case v != nil:
		s, err := text(v)
		switch {
		case err != nil:
		case s == "x-forwarded":
			fd.OriginalRequest = OriginalXForwarded
		case s == "x-original":
			fd.OriginalRequest = OriginalXOriginal
		default:
			err = fmt.Errorf("%q: want x-forwarded or x-original", s)
		}
		if err != nil {
			r.fail(v, at{}, path+".original_request", err)
		}
	}
	dn := f["domains"]
	switch {
	case dn == nil:
		r.fail(n, at{}, path+".domains", errors.New("missing: map each domain the front door serves to its descriptors"))
		return fd
	case dn.Kind != yaml.MappingNode || len(dn.Content) == 0:
		r.fail(dn, at{}, path+".domains", fmt.Errorf("want a mapping of domain names to lists of descriptors, got %s", describe(dn)))
		return fd
	}
	for i := 0; i+1 < len(dn.Content); i += 2 {
		k, v := dn.Content[i], dn.Content[i+1]
		domain, err := identifier(k)
		switch {
		case err != nil:
			r.fail(k, at{}, path+".domains", fmt.Errorf("domain name: %w", err))
			continue
		case fd.domains[domain] != nil:
			r.fail(k, at{}, path+".domains."+domain, errors.New("repeated domain"))
			continue
		case p.domains[domain] == nil:
			r.fail(k, at{}, path+".domains."+domain, fmt.Errorf("the policy has no domain %q (domains: %s)", domain, strings.Join(p.names, ", ")))
			continue
		}
		fd.domains[domain] = r.frontDoorDomain(path+".domains."+domain, domain, v, p)
		fd.names = append(fd.names, domain)
	}
	if v := f["default_domain"]; v != nil {
		name, err := identifier(v)
		if err == nil && fd.domains[name] == nil {
			err = fmt.Errorf("%q is not one of the front door's domains (%s)", name, strings.Join(fd.names, ", "))
		}
		if err != nil {
			r.fail(v, at{}, path+".default_domain", err)
		}
		fd.DefaultDomain = name
	}
	return fd
}

func (r *reader) frontDoorDomain(path, domain string, n *yaml.Node, p *Policy) *FrontDoorDomain {
	fdd := &FrontDoorDomain{Domain: domain, Line: n.Line}
	switch {
	case n.Kind != yaml.SequenceNode:
		r.fail(n, at{}, path, fmt.Errorf("want a list of descriptors ({actions: [...]}), got %s", describe(n)))
		return fdd
	case len(n.Content) == 0:
		r.fail(n, at{}, path, errors.New("empty: list the descriptors to build"))
		return fdd
	case len(n.Content) > MaxFrontDoorDescriptors:
		r.fail(n, at{}, path, fmt.Errorf("%d descriptors: at most %d", len(n.Content), MaxFrontDoorDescriptors))
		return fdd
	}
	for i, dn := range n.Content {
		dpath := fmt.Sprintf("%s[%d]", path, i+1)
		d := r.descriptorSpec(dpath, dn)
		if d == nil {
			continue
		}
		fdd.Descriptors = append(fdd.Descriptors, d)
		if keys := d.keys(); !p.domains[domain].hasKeys(keys) && !(len(keys) == 1 && keys[0] == p.requestIDKey) {
			r.warn(d.Line, at{}, dpath, fmt.Errorf("no rule of domain %q has the keys (%s): this descriptor never limits anything",
				domain, strings.Join(keys, ", ")))
		}
	}
	return fdd
}

func (r *reader) descriptorSpec(path string, n *yaml.Node) *DescriptorSpec {
	f := r.fields(n, at{}, path, descriptorFields)
	if f == nil {
		return nil
	}
	before := len(r.errs)
	d := &DescriptorSpec{Line: n.Line}
	an := f["actions"]
	switch {
	case an == nil:
		r.fail(n, at{}, path+".actions", errors.New("missing"))
	case an.Kind != yaml.SequenceNode:
		r.fail(an, at{}, path+".actions", fmt.Errorf("want a list of actions (%s), got %s", strings.Join(actionOrder, ", "), describe(an)))
	case len(an.Content) == 0:
		r.fail(an, at{}, path+".actions", errors.New("empty: a descriptor needs at least one action"))
	case len(an.Content) > MaxFrontDoorActions:
		r.fail(an, at{}, path+".actions", fmt.Errorf("%d actions: at most %d", len(an.Content), MaxFrontDoorActions))
	default:
		for i, acn := range an.Content {
			if ac, ok := r.action(fmt.Sprintf("%s.actions[%d]", path, i+1), acn); ok {
				d.Actions = append(d.Actions, ac)
			}
		}
	}
	if hn := f["hits_addend"]; hn != nil {
		hf := r.fields(hn, at{}, path+".hits_addend", hitsAddendFields)
		if hf != nil {
			if v := hf["request_header"]; v == nil {
				r.fail(hn, at{}, path+".hits_addend.request_header", errors.New("missing"))
			} else if h, err := headerName(v); err != nil {
				r.fail(v, at{}, path+".hits_addend.request_header", err)
			} else {
				d.HitsAddendHeader = h
			}
		}
	}
	if len(r.errs) > before {
		return nil
	}
	seen := map[string]int{}
	for _, ac := range d.Actions {
		if first := seen[ac.Key]; first != 0 {
			r.fail(&yaml.Node{Line: ac.Line}, at{}, path+".actions", fmt.Errorf("descriptor_key %q repeated (first at line %d)", ac.Key, first))
		}
		seen[ac.Key] = ac.Line
	}
	return d
}

// action reads one action: a mapping with one field, the action's kind,
// whose value holds its options.
func (r *reader) action(path string, n *yaml.Node) (Action, bool) {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		r.fail(n, at{}, path, fmt.Errorf("want one action (%s) with its options, got %s", strings.Join(actionOrder, ", "), describe(n)))
		return Action{}, false
	}
	kn, on := n.Content[0], n.Content[1]
	kind, ok := actionKinds[kn.Value]
	if !ok || kn.Kind != yaml.ScalarNode {
		r.fail(kn, at{}, path, fmt.Errorf("unknown action %s (known: %s)", describe(kn), strings.Join(actionOrder, ", ")))
		return Action{}, false
	}
	path += "." + kn.Value
	ac := Action{Kind: kind, Line: kn.Line, Key: kn.Value}
	if kind == ActionRequestHeader {
		ac.Key = ""
	}
	var f map[string]*yaml.Node
	if on.Kind == yaml.ScalarNode && on.ShortTag() == "!!null" {
		f = map[string]*yaml.Node{}
	} else if f = r.fields(on, at{}, path, actionFields[kn.Value]); f == nil {
		return Action{}, false
	}
	before := len(r.errs)
	if v := f["descriptor_key"]; v != nil {
		if k, err := identifier(v); err != nil {
			r.fail(v, at{}, path+".descriptor_key", err)
		} else if len(k) > maxDescriptorKeyBytes {
			r.fail(v, at{}, path+".descriptor_key", fmt.Errorf("%d bytes: at most %d", len(k), maxDescriptorKeyBytes))
		} else {
			ac.Key = k
		}
	} else if kind == ActionRequestHeader {
		r.fail(on, at{}, path+".descriptor_key", errors.New("missing"))
	}
	switch kind {
	case ActionRequestHeader:
		if v := f["header_name"]; v == nil {
			r.fail(on, at{}, path+".header_name", errors.New("missing"))
		} else if h, err := headerName(v); err != nil {
			r.fail(v, at{}, path+".header_name", err)
		} else {
			ac.Header = h
		}
		ac.SkipIfAbsent = r.flag(f, path, "skip_if_absent")
	case ActionPath:
		ac.StripQuery = r.flag(f, path, "strip_query")
	case ActionGenericKey:
		if v := f["descriptor_value"]; v == nil {
			r.fail(on, at{}, path+".descriptor_value", errors.New("missing"))
		} else if s, err := text(v); err != nil || s == "" {
			r.fail(v, at{}, path+".descriptor_value", cmp.Or(err, errors.New("empty")))
		} else {
			ac.Value = s
		}
	}
	return ac, len(r.errs) == before
}

func (r *reader) flag(f map[string]*yaml.Node, path, field string) bool {
	v := f[field]
	if v == nil {
		return false
	}
	b, err := boolean(v)
	if err != nil {
		r.fail(v, at{}, path+"."+field, err)
	}
	return b
}

// headerName reads an HTTP header name (a token, or a pseudo-header such as
// ":authority" that Envoy puts in a CheckRequest) and returns it in lower
// case.
func headerName(n *yaml.Node) (string, error) {
	s, err := text(n)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(s, ":")
	if name == "" || strings.IndexFunc(name, func(c rune) bool { return !isTokenChar(c) }) >= 0 {
		return "", fmt.Errorf("%q is not an HTTP header name", s)
	}
	return strings.ToLower(s), nil
}

func isTokenChar(c rune) bool {
	return c < 0x7f && c > ' ' && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
}

// keys are the descriptor keys the spec produces, in order, when every
// header is present.
func (d *DescriptorSpec) keys() []string {
	keys := make([]string, len(d.Actions))
	for i, ac := range d.Actions {
		keys[i] = ac.Key
	}
	return keys
}

// hasKeys reports whether some rule of the domain has exactly these keys.
func (d *domain) hasKeys(keys []string) bool {
	for _, r := range d.rules {
		if len(r.Match) == len(keys) {
			same := true
			for i, m := range r.Match {
				same = same && m.Key == keys[i]
			}
			if same {
				return true
			}
		}
	}
	return false
}
