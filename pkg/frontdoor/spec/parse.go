package spec

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/internal/suggest"
)

// Limits on a front door, the same as on a ratelimit request (see
// package service): a descriptor list must fit one store call.
const (
	MaxDescriptors        = 64
	MaxActions            = 32
	maxDescriptorKeyBytes = 256
	// MaxTrustedProxyHops bounds trusted_proxy_hops; more is a typo.
	MaxTrustedProxyHops = 16
)

// Reader reads the section's YAML as the rest of the policy file is read,
// and records the problems it finds with the file's others, so that a bad
// file is reported whole. Package policy implements it.
type Reader interface {
	// Fields checks that n is a mapping whose keys are all known and none
	// repeated, and returns the value node of each field present; nil when
	// n is no mapping. what names n in the problems.
	Fields(n *yaml.Node, what string, known []string) map[string]*yaml.Node
	// Fail records an error at n's line in the named field.
	Fail(n *yaml.Node, field string, err error)
	// Warn records a warning at a line in the named field.
	Warn(line int, field string, err error)
	// Failures is how many errors have been recorded so far.
	Failures() int
	// Text, Integer, Boolean and Identifier read a scalar (an identifier is
	// a non-empty string of printable characters); Describe names a node
	// in a problem ("a list", `"x"`).
	Text(n *yaml.Node) (string, error)
	Integer(n *yaml.Node) (int64, error)
	Boolean(n *yaml.Node) (bool, error)
	Identifier(n *yaml.Node) (string, error)
	Describe(n *yaml.Node) string
}

// Rules is what Parse needs of the policy's domains, read before the
// section.
type Rules interface {
	// Domains returns the domain names, sorted.
	Domains() []string
	HasDomain(name string) bool
	// HasKeys reports whether some rule of the domain matches descriptors
	// with exactly these keys, in this order.
	HasKeys(domain string, keys []string) bool
	// RequestIDKey is the descriptor key that carries a request's id.
	RequestIDKey() string
}

var (
	doorFields       = []string{"trusted_proxy_hops", "original_request", "default_domain", "normalize_path", "domains"}
	descriptorFields = []string{"actions", "hits_addend"}
	hitsAddendFields = []string{"request_header"}
	actionFields     = map[string][]string{
		"remote_address":  {"descriptor_key"},
		"request_headers": {"header_name", "descriptor_key", "skip_if_absent"},
		"path":            {"descriptor_key", "strip_query", "strip_trailing_slash", "lowercase"},
		"method":          {"descriptor_key"},
		"host":            {"descriptor_key", "lowercase"},
		"scheme":          {"descriptor_key"},
		"generic_key":     {"descriptor_value", "descriptor_key"},
	}
	actionKinds = map[string]ActionKind{
		"remote_address": ActionRemoteAddress, "request_headers": ActionRequestHeader, "path": ActionPath,
		"method": ActionMethod, "host": ActionHost, "scheme": ActionScheme, "generic_key": ActionGenericKey,
	}
	actionOrder = []string{"remote_address", "request_headers", "path", "method", "host", "scheme", "generic_key"}
)

// Parse reads the front_doors section n and returns its front doors by
// name. Problems go to r; what it returns is meaningful only when r has
// recorded no error.
func Parse(n *yaml.Node, r Reader, rules Rules) map[string]*Door {
	p := parser{r, rules}
	f := r.Fields(n, "front_doors", Names)
	if f == nil {
		return nil
	}
	doors := make(map[string]*Door, len(f))
	for _, name := range Names {
		if v := f[name]; v != nil {
			if d := p.door(name, v); d != nil {
				doors[name] = d
			}
		}
	}
	return doors
}

type parser struct {
	r     Reader
	rules Rules
}

func (p parser) door(name string, n *yaml.Node) *Door {
	r := p.r
	path := "front_doors." + name
	f := r.Fields(n, path, doorFields)
	if f == nil {
		return nil
	}
	d := &Door{Name: name, Line: n.Line, domains: map[string]*Domain{}}
	d.NormalizePath = p.flag(f, path, "normalize_path", true)
	if v := f["trusted_proxy_hops"]; v != nil {
		hops, err := r.Integer(v)
		if err == nil && (hops < 0 || hops > MaxTrustedProxyHops) {
			err = fmt.Errorf("%d: want 0 (use the direct peer) to %d", hops, MaxTrustedProxyHops)
		}
		if err != nil {
			r.Fail(v, path+".trusted_proxy_hops", err)
		}
		d.TrustedProxyHops = int(hops)
	}
	v := f["original_request"]
	switch {
	case name != ForwardAuth && v != nil:
		r.Fail(v, path+".original_request", errors.New("only forward_auth has it: ext_authz reads the original request from the CheckRequest"))
	case name == ForwardAuth && v == nil:
		r.Fail(n, path+".original_request", errors.New("missing: say which headers describe the original request, "+
			"x-forwarded (Traefik, Caddy, HAProxy: X-Forwarded-Method/Uri/Host/Proto) or x-original (ingress-nginx: X-Original-Method/URL); "+
			"headers of the other kind are the client's own and are ignored"))
	case v != nil:
		s, err := r.Text(v)
		switch {
		case err != nil:
		case s == "x-forwarded":
			d.OriginalRequest = OriginalXForwarded
		case s == "x-original":
			d.OriginalRequest = OriginalXOriginal
		default:
			err = fmt.Errorf("%q: want x-forwarded or x-original", s)
		}
		if err != nil {
			r.Fail(v, path+".original_request", err)
		}
	}
	dn := f["domains"]
	switch {
	case dn == nil:
		r.Fail(n, path+".domains", errors.New("missing: map each domain the front door serves to its descriptors"))
		return d
	case dn.Kind != yaml.MappingNode || len(dn.Content) == 0:
		r.Fail(dn, path+".domains", fmt.Errorf("want a mapping of domain names to lists of descriptors, got %s", r.Describe(dn)))
		return d
	}
	for i := 0; i+1 < len(dn.Content); i += 2 {
		k, v := dn.Content[i], dn.Content[i+1]
		domain, err := r.Identifier(k)
		switch {
		case err != nil:
			r.Fail(k, path+".domains", fmt.Errorf("domain name: %w", err))
			continue
		case d.domains[domain] != nil:
			r.Fail(k, path+".domains."+domain, errors.New("repeated domain"))
			continue
		case !p.rules.HasDomain(domain):
			r.Fail(k, path+".domains."+domain, fmt.Errorf("the policy has no domain %q (domains: %s)", domain, strings.Join(p.rules.Domains(), ", ")))
			continue
		}
		d.domains[domain] = p.domain(path+".domains."+domain, domain, v)
		d.names = append(d.names, domain)
	}
	if v := f["default_domain"]; v != nil {
		name, err := r.Identifier(v)
		if err == nil && d.domains[name] == nil {
			err = fmt.Errorf("%q is not one of the front door's domains (%s)", name, strings.Join(d.names, ", "))
		}
		if err != nil {
			r.Fail(v, path+".default_domain", err)
		}
		d.DefaultDomain = name
	}
	return d
}

func (p parser) domain(path, domain string, n *yaml.Node) *Domain {
	r := p.r
	dd := &Domain{Name: domain, Line: n.Line}
	switch {
	case n.Kind != yaml.SequenceNode:
		r.Fail(n, path, fmt.Errorf("want a list of descriptors ({actions: [...]}), got %s", r.Describe(n)))
		return dd
	case len(n.Content) == 0:
		r.Fail(n, path, errors.New("empty: list the descriptors to build"))
		return dd
	case len(n.Content) > MaxDescriptors:
		r.Fail(n, path, fmt.Errorf("%d descriptors: at most %d", len(n.Content), MaxDescriptors))
		return dd
	}
	for i, dn := range n.Content {
		dpath := fmt.Sprintf("%s[%d]", path, i+1)
		d := p.descriptor(dpath, dn)
		if d == nil {
			continue
		}
		dd.Descriptors = append(dd.Descriptors, d)
		if keys := d.keys(); !p.rules.HasKeys(domain, keys) && !(len(keys) == 1 && keys[0] == p.rules.RequestIDKey()) {
			r.Warn(d.Line, dpath, fmt.Errorf("no rule of domain %q has the keys (%s): this descriptor never limits anything",
				domain, strings.Join(keys, ", ")))
		}
	}
	return dd
}

func (p parser) descriptor(path string, n *yaml.Node) *Descriptor {
	r := p.r
	f := r.Fields(n, path, descriptorFields)
	if f == nil {
		return nil
	}
	before := r.Failures()
	d := &Descriptor{Line: n.Line}
	an := f["actions"]
	switch {
	case an == nil:
		r.Fail(n, path+".actions", errors.New("missing"))
	case an.Kind != yaml.SequenceNode:
		r.Fail(an, path+".actions", fmt.Errorf("want a list of actions (%s), got %s", strings.Join(actionOrder, ", "), r.Describe(an)))
	case len(an.Content) == 0:
		r.Fail(an, path+".actions", errors.New("empty: a descriptor needs at least one action"))
	case len(an.Content) > MaxActions:
		r.Fail(an, path+".actions", fmt.Errorf("%d actions: at most %d", len(an.Content), MaxActions))
	default:
		for i, acn := range an.Content {
			if ac, ok := p.action(fmt.Sprintf("%s.actions[%d]", path, i+1), acn); ok {
				d.Actions = append(d.Actions, ac)
			}
		}
	}
	if hn := f["hits_addend"]; hn != nil {
		hf := r.Fields(hn, path+".hits_addend", hitsAddendFields)
		if hf != nil {
			if v := hf["request_header"]; v == nil {
				r.Fail(hn, path+".hits_addend.request_header", errors.New("missing"))
			} else if h, err := p.headerName(v); err != nil {
				r.Fail(v, path+".hits_addend.request_header", err)
			} else {
				d.HitsAddendHeader = h
			}
		}
	}
	if r.Failures() > before {
		return nil
	}
	seen := map[string]int{}
	for _, ac := range d.Actions {
		if first := seen[ac.Key]; first != 0 {
			r.Fail(&yaml.Node{Line: ac.Line}, path+".actions", fmt.Errorf("descriptor_key %q repeated (first at line %d)", ac.Key, first))
		}
		seen[ac.Key] = ac.Line
	}
	return d
}

// action reads one action: a mapping with one field, the action's kind,
// whose value holds its options.
func (p parser) action(path string, n *yaml.Node) (Action, bool) {
	r := p.r
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		r.Fail(n, path, fmt.Errorf("want one action (%s) with its options, got %s", strings.Join(actionOrder, ", "), r.Describe(n)))
		return Action{}, false
	}
	kn, on := n.Content[0], n.Content[1]
	kind, ok := actionKinds[kn.Value]
	if !ok || kn.Kind != yaml.ScalarNode {
		r.Fail(kn, path, fmt.Errorf("unknown action %s%s", r.Describe(kn), suggest.OrKnown(kn.Value, actionOrder)))
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
	} else if f = r.Fields(on, path, actionFields[kn.Value]); f == nil {
		return Action{}, false
	}
	before := r.Failures()
	if v := f["descriptor_key"]; v != nil {
		if k, err := r.Identifier(v); err != nil {
			r.Fail(v, path+".descriptor_key", err)
		} else if len(k) > maxDescriptorKeyBytes {
			r.Fail(v, path+".descriptor_key", fmt.Errorf("%d bytes: at most %d", len(k), maxDescriptorKeyBytes))
		} else {
			ac.Key = k
		}
	} else if kind == ActionRequestHeader {
		r.Fail(on, path+".descriptor_key", errors.New("missing"))
	}
	switch kind {
	case ActionRequestHeader:
		if v := f["header_name"]; v == nil {
			r.Fail(on, path+".header_name", errors.New("missing"))
		} else if h, err := p.headerName(v); err != nil {
			r.Fail(v, path+".header_name", err)
		} else {
			ac.Header = h
		}
		ac.SkipIfAbsent = p.flag(f, path, "skip_if_absent", false)
	case ActionPath:
		ac.StripQuery = p.flag(f, path, "strip_query", false)
		ac.StripTrailingSlash = p.flag(f, path, "strip_trailing_slash", false)
		ac.Lowercase = p.flag(f, path, "lowercase", false)
	case ActionHost:
		ac.Lowercase = p.flag(f, path, "lowercase", false)
	case ActionGenericKey:
		if v := f["descriptor_value"]; v == nil {
			r.Fail(on, path+".descriptor_value", errors.New("missing"))
		} else if s, err := r.Text(v); err != nil || s == "" {
			r.Fail(v, path+".descriptor_value", cmp.Or(err, errors.New("empty")))
		} else {
			ac.Value = s
		}
	}
	return ac, r.Failures() == before
}

// flag reads a boolean field; def when it is absent.
func (p parser) flag(f map[string]*yaml.Node, path, field string, def bool) bool {
	v := f[field]
	if v == nil {
		return def
	}
	b, err := p.r.Boolean(v)
	if err != nil {
		p.r.Fail(v, path+"."+field, err)
	}
	return b
}

// headerName reads an HTTP header name (a token, or a pseudo-header such as
// ":authority" that Envoy puts in a CheckRequest) and returns it in lower
// case.
func (p parser) headerName(n *yaml.Node) (string, error) {
	s, err := p.r.Text(n)
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
