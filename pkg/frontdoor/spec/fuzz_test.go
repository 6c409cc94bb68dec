package spec_test

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

// fuzzPolicy has every action with every option, on two doors: ext_authz
// with the path normalised and one trusted proxy, forward_auth with
// normalize_path off and two.
const fuzzPolicy = `request_id_key: request_id
domains:
  edge:
    - name: per-client
      match: [{key: remote_address}]
      capacity: 5
      refill: 1/s
    - name: per-user-path
      match: [{key: user_id}, {key: path}]
      capacity: 10
      refill: 1/s
    - name: per-route
      match: [{key: generic_key, value: api}, {key: method}, {key: host}, {key: scheme}, {key: path}]
      capacity: 100
      refill: 10/s
    - name: per-tenant
      match: [{key: tenant}, {key: path}]
      capacity: 100
      refill: 10/s
front_doors:
  ext_authz:
    trusted_proxy_hops: 1
    domains:
      edge:
DESCRIPTORS
  forward_auth:
    trusted_proxy_hops: 2
    original_request: x-forwarded
    normalize_path: false
    domains:
      edge:
DESCRIPTORS
`

// fuzzDescriptors are both doors' descriptors (the policy file has no
// YAML aliases).
const fuzzDescriptors = `        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: X-User-ID, descriptor_key: user_id}
            - path: {strip_query: true}
          hits_addend: {request_header: x-cost}
        - actions:
            - generic_key: {descriptor_value: api}
            - method: {}
            - host: {lowercase: true}
            - scheme: {}
            - path: {strip_query: true, strip_trailing_slash: true, lowercase: true}
        - actions:
            - request_headers: {header_name: x-tenant, descriptor_key: tenant, skip_if_absent: true}
            - path: {strip_trailing_slash: true}
        - actions: [{request_headers: {header_name: x-request-id, descriptor_key: request_id}}]`

// FuzzDescriptors: what a front door knows of a request (the peer, each
// X-Forwarded-For value on a line of xff, method, target, host, scheme,
// and headers as "name: value" lines) becomes, on both doors, exactly the
// descriptors the policy says, without a panic; NormalizePath is
// idempotent, and every spelling of a path that it documents as the same
// path gives the same descriptors.
func FuzzDescriptors(f *testing.F) {
	p, err := policy.Parse("policy.yaml", []byte(strings.ReplaceAll(fuzzPolicy, "DESCRIPTORS", fuzzDescriptors)))
	if err != nil {
		f.Fatal(err)
	}
	doors := p.FrontDoors()
	f.Add("10.0.0.9:5555", "", "GET", "/login", "App.Example.com", "https", "x-user-id: alice")
	f.Add("10.0.0.9", "6.6.6.6, 1.1.1.1\n10.0.0.8", "POST", "//api/./v1/%6bey;jsessionid=1/../x/?q=/a/../b", "h", "http",
		"x-user-id: bob\nx-cost:  7 \nx-tenant: t1")
	f.Add("[::ffff:10.0.0.9]:80", " 1.1.1.1:443 , ,\n2001:DB8::1", "", `\a\..\%2e%2E\b%2f%zz%`, "", "", "x-cost: -1\nx-tenant:")
	f.Add("::1", "unknown,10.0.0.9", "PUT", "?only=query", "HOST", "https", "x-request-id: r-1\nx-cost: 18446744073709551616")
	f.Add("fe80::1%eth0", "1.2.3.4%eth0,::ffff:1.2.3.4", "GET", "/A/B/..;/C;x/.%2E/%7e~/%C3%A9\xff é", "x", "https", "x-user-id: \xff")
	f.Add("", "", "GET", "", "", "", "")
	f.Fuzz(func(t *testing.T, peer, xff, method, target, host, scheme, headerLines string) {
		norm := spec.NormalizePath(target)
		if again := spec.NormalizePath(norm); again != norm {
			t.Fatalf("NormalizePath(%q) = %q, then %q", target, norm, again)
		}
		if !strings.HasPrefix(norm, "/") || strings.ContainsAny(norm, `\; `) || strings.Contains(norm, "//") {
			t.Fatalf("NormalizePath(%q) = %q: not a normal path", target, norm)
		}
		var forwarded []string
		if xff != "" {
			forwarded = strings.Split(xff, "\n")
		}
		hs := headers{}
		for _, line := range strings.Split(headerLines, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				hs[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		for _, door := range doors {
			addr := door.ClientAddress(peer, forwarded)
			if want := clientAddress(door.TrustedProxyHops, peer, forwarded); addr != want {
				t.Fatalf("%s: ClientAddress(%q, %q) = %q, want %q", door.Name, peer, forwarded, addr, want)
			}
			a := spec.Attributes{RemoteAddress: addr, Method: method, Path: target, Host: host, Scheme: scheme, Headers: hs}
			got := build(t, door, a)
			if want := wantDescriptors(door, a); got != want {
				t.Fatalf("%s, %+v:\ngot  %s\nwant %s", door.Name, a, got, want)
			}
			if !door.NormalizePath || target == "" {
				continue // "" is no target, which no other spelling is
			}
			for _, spelling := range spellings(target) {
				a.Path = spelling
				if again := build(t, door, a); again != got {
					t.Fatalf("%s: target %q is %q, but %q is %q", door.Name, target, got, spelling, again)
				}
			}
		}
	})
}

// build is every descriptor the door builds for the edge domain, as the
// front doors build them: the target through Door.Target first. One line
// per descriptor: its entries, or what it lacks, and its cost.
func build(t *testing.T, door *spec.Door, a spec.Attributes) string {
	a.Path = door.Target(a.Path)
	var b strings.Builder
	for _, d := range door.Domain("edge").Descriptors {
		entries, missing := d.Build(&a, nil)
		cost, ok, err := d.HitsAddend(&a)
		if missing != "" {
			entries = nil
		}
		fmt.Fprintf(&b, "%s missing %q cost %d %v %v\n", formatEntries(entries), missing, cost, ok, err != nil)
	}
	return b.String()
}

// wantDescriptors is build's answer worked out from the policy's words
// (package doc, Action, Door.Target).
func wantDescriptors(door *spec.Door, a spec.Attributes) string {
	var b strings.Builder
	for _, d := range door.Domain("edge").Descriptors {
		var entries []spec.Entry
		missing := ""
		for _, ac := range d.Actions {
			var v string
			switch ac.Kind {
			case spec.ActionRemoteAddress:
				v, missing = a.RemoteAddress, "remote address"
			case spec.ActionRequestHeader:
				hv, ok := a.Headers.Header(ac.Header)
				if !ok && ac.SkipIfAbsent {
					continue
				}
				v, missing = hv, "header "+ac.Header
				if ok {
					missing = ""
					entries = append(entries, spec.Entry{Key: ac.Key, Value: v})
					continue
				}
			case spec.ActionPath:
				v, missing = pathValue(door, ac, a.Path), "path"
			case spec.ActionMethod:
				v, missing = a.Method, "method"
			case spec.ActionHost:
				v, missing = a.Host, "host"
				if ac.Lowercase {
					v = strings.ToLower(v)
				}
			case spec.ActionScheme:
				v, missing = a.Scheme, "scheme"
			case spec.ActionGenericKey:
				v, missing = ac.Value, ""
			}
			if v == "" {
				break
			}
			entries, missing = append(entries, spec.Entry{Key: ac.Key, Value: v}), ""
		}
		if missing == "" && len(entries) == 0 {
			missing = "header it reads"
		}
		if missing != "" {
			entries = nil
		}
		var (
			cost uint64
			ok   bool
			bad  bool
		)
		if hv, present := a.Headers.Header(d.HitsAddendHeader); d.HitsAddendHeader != "" && present {
			c, err := strconv.ParseUint(strings.TrimSpace(hv), 10, 64)
			cost, ok, bad = c, err == nil, err != nil
			if bad {
				cost = 0
			}
		}
		fmt.Fprintf(&b, "%s missing %q cost %d %v %v\n", formatEntries(entries), missing, cost, ok, bad)
	}
	return b.String()
}

// pathValue is a path action's value for a request target: its path
// normalised (when the door says so and there is a target), then the
// action's options; the query as sent unless stripped.
func pathValue(door *spec.Door, ac spec.Action, target string) string {
	path, query, hasQuery := strings.Cut(target, "?")
	if door.NormalizePath && target != "" {
		path = spec.NormalizePath(path)
	}
	if ac.StripTrailingSlash && len(path) > 1 {
		if path = strings.TrimRight(path, "/"); path == "" {
			path = "/"
		}
	}
	if ac.Lowercase {
		path = strings.ToLower(path)
	}
	if hasQuery && !ac.StripQuery {
		return path + "?" + query
	}
	return path
}

// clientAddress is Door.ClientAddress as its doc describes it: the chain
// of X-Forwarded-For entries then the peer, the peer appended once, read
// hops entries left of it.
func clientAddress(hops int, peer string, xff []string) string {
	peer = canonical(peer)
	var chain []string
	for _, v := range xff {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				chain = append(chain, canonical(e))
			}
		}
	}
	if n := len(chain); n > 0 && chain[n-1] == peer {
		chain = chain[:n-1]
	}
	if hops == 0 || len(chain) < hops {
		return peer
	}
	return chain[len(chain)-hops]
}

// canonical is an IP address, with or without a port, in its canonical
// form without the port; anything else as it is.
func canonical(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("").String()
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("").String()
	}
	return s
}

// spellings are targets NormalizePath documents as the same path as
// target: separators doubled, "./" after each, backslashes for slashes, a
// path parameter on the last segment, each unreserved character
// percent-encoded (but where it may complete an escape). The query is
// left alone.
func spellings(target string) []string {
	path, query, hasQuery := strings.Cut(target, "?")
	out := []string{
		strings.ReplaceAll(path, "/", "//"),
		strings.ReplaceAll(path, "/", "/./"),
		strings.ReplaceAll(path, "/", `\`),
		path + ";p=1",
	}
	var enc strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		nearEscape := i > 0 && path[i-1] == '%' || i > 1 && path[i-2] == '%'
		if unreserved(c) && !nearEscape {
			fmt.Fprintf(&enc, "%%%02X", c)
		} else {
			enc.WriteByte(c)
		}
	}
	out = append(out, enc.String())
	if hasQuery {
		for i := range out {
			out[i] += "?" + query
		}
	}
	return out
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}
