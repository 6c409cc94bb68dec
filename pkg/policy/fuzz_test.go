package policy

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/store"
)

// FuzzParse: no input makes Parse panic; a refused file reports located
// issues; an accepted one is self-consistent (every rule is found by a
// descriptor built from its own patterns, or by an earlier rule), compiling
// it again after itself keeps every rule's version, and its front doors
// build descriptors of a shape the service accepts.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add(onePolicy(100, "7/3s", "scale"))
	f.Add([]byte("domains:\n  a:\n    - name: r\n      match: [{key: k, value: \"v*\"}]\n      unlimited: true\n"))
	f.Add([]byte("domains: {a: &x [], b: *x}\n"))
	f.Add([]byte("revision: 99999999999999999999\ndomains: {}\n"))
	f.Add([]byte("domains:\n  a:\n    - {name: r, match: [{key: k}], capacity: 1000000000000000, refill: 1000000000000/ns, cost: 0}\n"))
	f.Add([]byte(frontDoorSeed))
	for _, name := range []string{"examples/example.yaml", "unit/share_threshold.yaml", "unit/wildcard.yaml", "unit/basic_config.yaml"} {
		data, err := os.ReadFile("testdata/envoyproxy/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v is not Errors", err, err)
			}
			for _, is := range errs {
				if !strings.HasPrefix(is.Error(), "f.yaml") {
					t.Fatalf("issue %q does not name the file", is)
				}
			}
			return
		}
		_ = p.Summary()
		// A reference file's rules are in the walk's order, not the
		// file's: only that a rule's own descriptor matches is checked.
		ref := IsReference(data)
		for _, name := range p.Domains() {
			rules := p.Rules(name)
			for i, r := range rules {
				if r.HasBucket() && (r.Version == nil || r.Cost > costBound(r) || r.MaxCost > r.Version.Params.Capacity()) {
					t.Fatalf("rule %+v", r)
				}
				desc := make([]Entry, len(r.Match))
				for j, m := range r.Match {
					desc[j] = Entry{Key: m.Key, Value: m.Value}
					switch m.Kind {
					case MatchGlob:
						desc[j].Value = strings.ReplaceAll(m.Value, "*", "")
					case MatchPrefix, MatchAny:
						desc[j].Value += "x"
					}
				}
				got := p.Match(name, desc)
				if got == nil || !ref && (got.Line > r.Line || (got != r && !slices.Contains(rules[:i], got))) {
					t.Fatalf("rule %q: its own descriptor %v matched %v", r.Name, desc, got)
				}
				_ = p.Explain(name, desc).String()
			}
		}
		recompiles(t, p, data)
		checkFrontDoors(t, p)
	})
}

// frontDoorSeed has both front doors, every action and a cost header.
const frontDoorSeed = `request_id_key: request_id
domains:
  edge:
    - {name: per-client, match: [{key: remote_address}], capacity: 5, refill: 1/s}
    - {name: per-user, match: [{key: user_id}, {key: path, value: /api/*}], capacity: 10, refill: 1/s, cost: 2, max_cost: 4}
    - {name: route, match: [{key: generic_key, value: api}, {key: method}, {key: host}, {key: scheme}], unlimited: true}
front_doors:
  ext_authz:
    trusted_proxy_hops: 1
    default_domain: edge
    domains:
      edge:
        - actions: [{remote_address: {}}]
        - actions:
            - request_headers: {header_name: X-User-ID, descriptor_key: user_id, skip_if_absent: true}
            - path: {strip_query: true, strip_trailing_slash: true, lowercase: true}
          hits_addend: {request_header: x-cost}
        - actions: [{generic_key: {descriptor_value: api}}, {method: }, {host: {lowercase: true}}, {scheme: {}}]
        - actions: [{request_headers: {header_name: x-request-id, descriptor_key: request_id}}]
  forward_auth:
    original_request: x-original
    normalize_path: false
    domains: {edge: [{actions: [{remote_address: {}}]}]}
`

// recompiles: the same file compiled after itself keeps the *bucket.Version
// of every limited rule, and retires none.
func recompiles(t *testing.T, p *Policy, data []byte) {
	t.Helper()
	again, err := new(Compiler).Compile("f.yaml", data, p, 1)
	if err != nil {
		t.Fatalf("accepted once, refused after itself: %v", err)
	}
	for _, name := range p.Domains() {
		for _, r := range p.Rules(name) {
			if r2 := again.Rule(name, r.Name); r2 == nil || r2.Version != r.Version {
				t.Fatalf("rule %s/%s: version %v, then %v", name, r.Name, r.Version, r2)
			}
		}
	}
	if len(again.removed) != 0 {
		t.Fatalf("compiled after itself, it retires %d lineages", len(again.removed))
	}
}

// checkFrontDoors: every domain a front door lists is one it builds
// descriptors for, and those fit the shape pkg/service accepts (at most
// store.MaxItems descriptors, each of 1 to spec.MaxActions entries with
// keys of 1 to 256 bytes); anything else would make a client's request a
// gRPC error instead of a decision.
func checkFrontDoors(t *testing.T, p *Policy) {
	t.Helper()
	for _, door := range p.FrontDoors() {
		if door.DefaultDomain != "" && door.Domain("") == nil {
			t.Fatalf("front door %s: default_domain %q serves nothing", door.Name, door.DefaultDomain)
		}
		for _, name := range door.Domains() {
			d := door.Domain(name)
			if d == nil || d.Name != name || p.Rules(name) == nil {
				t.Fatalf("front door %s lists domain %q: %+v", door.Name, name, d)
			}
			if n := len(d.Descriptors); n == 0 || n > store.MaxItems {
				t.Fatalf("front door %s domain %s: %d descriptors", door.Name, name, n)
			}
			for _, ds := range d.Descriptors {
				if n := len(ds.Actions); n == 0 || n > spec.MaxActions {
					t.Fatalf("front door %s domain %s line %d: %d actions", door.Name, name, ds.Line, n)
				}
				for _, ac := range ds.Actions {
					if ac.Key == "" || len(ac.Key) > 256 || (ac.Kind == spec.ActionRequestHeader) != (ac.Header != "") {
						t.Fatalf("front door %s domain %s: action %s", door.Name, name, ac.String())
					}
				}
			}
		}
	}
}

// costBound is the largest default cost r may have: its max_cost, or for
// a rule charged below zero (which refuses no cost: MaxCost 0) its
// capacity; -1 for a rule whose max_cost is wrong for its charge.
func costBound(r *Rule) int64 {
	switch {
	case r.PostPaid() != (r.MaxCost == 0):
		return -1
	case r.PostPaid():
		return r.Version.Params.Capacity()
	}
	return r.MaxCost
}
