package policy

// "compat" in this file's names, and in compatflat.go's, means
// envoyproxy/ratelimit's configuration format (the "reference" of the
// comments). That format, read natively: one file is one domain,
//
//	domain: edge
//	descriptors:
//	  - key: user                # value omitted: any value, a bucket per value
//	    rate_limit: {unit: minute, requests_per_unit: 10, name: per-user}
//	    descriptors:             # nested: the descriptor's next entry
//	      - key: path
//	        value: /api/*        # a wildcard; "a*b*c" as well
//	        share_threshold: true
//	        rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: per-user}]}
//	        shadow_mode: true
//
// read into a tree of compatNodes (this file) that compatflat.go turns into
// ordinary rules, so that both formats decide on one path. The reference
// accepts any of its known keys at any level and ignores the misplaced
// ones; so do we, with a warning. Errors carry file:line like the native
// format's.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// compatKeys are every key the reference knows, at any level.
var compatKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata"}

var (
	compatTopFields   = []string{"domain", "descriptors"}
	compatNodeFields  = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	compatLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}
)

// compatNode is one descriptor of a reference file.
type compatNode struct {
	key, value string
	composite  string // key, or key_value: the reference's map key
	line       int
	pattern    Pattern
	limit      *compatLimit // nil: no rate_limit
	shadow     bool
	quota      bool // quota_mode
	detailed   bool // detailed_metric
	toMetric   bool // value_to_metric
	children   []*compatNode
}

type compatLimit struct {
	rpu       uint32
	unit      Unit
	unlimited bool
	name      string
	replaces  []string
}

// compatFile is one parsed reference file: its domain and top descriptors.
type compatFile struct {
	domain     string
	domainLine int
	nodes      []*compatNode
}

// compatFields is fields for a level of a reference file: a key the
// reference knows but not at this level is ignored with a warning, as the
// reference ignores it.
func (r *reader) compatFields(n *yaml.Node, a at, what string, here []string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		r.fail(n, a, "", fmt.Errorf("%s: want a mapping, got %s", what, describe(n)))
		return nil
	}
	keep := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.ScalarNode && !slices.Contains(here, k.Value) && slices.Contains(compatKeys, k.Value) {
			r.warn(k.Line, a, k.Value, fmt.Errorf("%s: ignored here, as envoyproxy/ratelimit ignores it", what))
			continue
		}
		keep.Content = append(keep.Content, k, n.Content[i+1])
	}
	return r.fields(keep, a, what, here)
}

// compatParse reads a reference file whose root is known to be a mapping.
func (r *reader) compatParse(root *yaml.Node) *compatFile {
	f := r.compatFields(root, at{}, "config", compatTopFields)
	if f == nil {
		return nil
	}
	out := &compatFile{domainLine: root.Line}
	if n := f["domain"]; n == nil {
		r.fail(root, at{}, "domain", errors.New("missing"))
	} else if s, err := identifier(n); err != nil {
		r.fail(n, at{}, "domain", err)
	} else {
		out.domain, out.domainLine = s, n.Line
	}
	a := at{domain: out.domain}
	if n := f["descriptors"]; n != nil {
		out.nodes = r.compatNodes(n, a, "", 1)
	}
	if len(out.nodes) == 0 && out.domain != "" {
		r.warn(out.domainLine, a, "descriptors", errors.New("none: every request to this domain is answered OK"))
	}
	return out
}

// compatNodes reads a list of descriptors at depth (1 at the top); path is
// the parent's, for messages.
func (r *reader) compatNodes(n *yaml.Node, a at, path string, depth int) []*compatNode {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.fail(n, a, "descriptors", fmt.Errorf("want a list, got %s", describe(n)))
		return nil
	}
	var nodes []*compatNode
	seen := make(map[string]int)
	for _, dn := range n.Content {
		node := r.compatNode(dn, a, path, depth)
		if node == nil {
			continue
		}
		if first := seen[node.composite]; first != 0 {
			r.fail(dn, a, "descriptors", fmt.Errorf("duplicate descriptor composite key %q (first at line %d)", joinPath(path, node.composite), first))
			continue
		}
		seen[node.composite] = node.line
		nodes = append(nodes, node)
	}
	return nodes
}

func joinPath(path, composite string) string {
	if path == "" {
		return composite
	}
	return path + "." + composite
}

// compatNode reads one descriptor at depth and its children; nil when it has
// errors. Below MaxMatchEntries levels it reads nothing more: no
// descriptor reaches there, and flattening a deeper tree would cost its
// depth cubed.
func (r *reader) compatNode(n *yaml.Node, a at, path string, depth int) *compatNode {
	before := len(r.errs)
	f := r.compatFields(n, a, "descriptor", compatNodeFields)
	if f == nil {
		return nil
	}
	node := &compatNode{line: n.Line}
	if kn := f["key"]; kn == nil {
		r.fail(n, a, "key", errors.New("descriptor has empty key"))
	} else if s, err := identifier(kn); err != nil {
		r.fail(kn, a, "key", err)
	} else {
		node.key = s
		if strings.Contains(s, "*") {
			r.warn(kn.Line, a, "key", fmt.Errorf("%q: a \"*\" in a key is a plain character here; envoyproxy/ratelimit reads key_value as one wildcard", s))
		}
	}
	if vn := f["value"]; vn != nil {
		s, err := text(vn)
		if err != nil {
			r.fail(vn, a, "value", err)
		}
		node.value = s
	}
	node.composite = node.key
	if node.value != "" {
		node.composite += "_" + node.value
	}
	here := joinPath(path, node.composite)
	node.pattern, _ = parsePattern(node.key, node.value, node.value != "") // never fails: no empty value
	node.shadow, _ = r.flag(f, a, "shadow_mode")
	node.detailed, _ = r.flag(f, a, "detailed_metric")
	node.toMetric, _ = r.flag(f, a, "value_to_metric")
	if share, _ := r.flag(f, a, "share_threshold"); share {
		if !strings.Contains(node.composite, "*") {
			r.fail(f["share_threshold"], a, "share_threshold", fmt.Errorf("can only be used with wildcard values (containing '*'), but found key %q", node.composite))
		}
		node.pattern.Shared = true
	}
	node.quota, _ = r.flag(f, a, "quota_mode")
	if mn := f["metadata"]; mn != nil {
		r.warn(mn.Line, a, "metadata", fmt.Errorf("%s: not returned: tokengate sends no dynamic metadata", here))
	}
	if ln := f["rate_limit"]; ln != nil {
		node.limit = r.compatLimit(ln, a, here)
	}
	switch dn := f["descriptors"]; {
	case dn == nil:
	case depth == MaxMatchEntries && dn.Kind == yaml.SequenceNode && len(dn.Content) > 0:
		r.fail(dn, a, "descriptors", fmt.Errorf("%s: nested deeper than %d levels: a descriptor has at most %d entries, so nothing below can match", here, MaxMatchEntries, MaxMatchEntries))
	default:
		node.children = r.compatNodes(dn, a, here, depth+1)
	}
	if len(r.errs) > before {
		return nil
	}
	return node
}

// compatLimit reads a rate_limit; what is the descriptor's path.
func (r *reader) compatLimit(n *yaml.Node, a at, what string) *compatLimit {
	f := r.compatFields(n, a, "rate_limit", compatLimitFields)
	if f == nil {
		return nil
	}
	l := &compatLimit{}
	l.unlimited, _ = r.flag(f, a, "unlimited")
	un := f["unit"]
	if un != nil {
		s, err := text(un)
		if err == nil {
			l.unit, err = ParseUnit(s)
		}
		switch {
		case l.unlimited && err == nil:
			r.fail(un, a, "rate_limit", fmt.Errorf("%s: should not specify rate limit unit when unlimited", what))
		case !l.unlimited && err != nil:
			r.fail(un, a, "rate_limit", fmt.Errorf("%s: invalid rate limit unit: %w", what, err))
		}
	} else if !l.unlimited {
		r.fail(n, a, "rate_limit", fmt.Errorf("%s: invalid rate limit unit '': unit missing", what))
	}
	if rn := f["requests_per_unit"]; rn != nil {
		v, err := requestsPerUnit(rn)
		if err != nil {
			r.fail(rn, a, "rate_limit", fmt.Errorf("%s: requests_per_unit: %w", what, err))
		}
		l.rpu = v
	} else if !l.unlimited {
		r.warn(n.Line, a, "rate_limit", fmt.Errorf("%s: requests_per_unit missing: it is 0, every request is over the limit", what))
	}
	if nn := f["name"]; nn != nil {
		s, err := text(nn)
		if err != nil {
			r.fail(nn, a, "rate_limit", fmt.Errorf("%s: name: %w", what, err))
		}
		l.name = s
	}
	if rn := f["replaces"]; rn != nil {
		l.replaces = r.compatReplaces(rn, a, what, l.name)
	}
	return l
}

func (r *reader) compatReplaces(n *yaml.Node, a at, what, own string) []string {
	if n.Kind != yaml.SequenceNode {
		r.fail(n, a, "replaces", fmt.Errorf("%s: want a list of {name: ...}, got %s", what, describe(n)))
		return nil
	}
	var names []string
	for _, en := range n.Content {
		f := r.compatFields(en, a, "replaces entry", []string{"name"})
		if f == nil {
			continue
		}
		var s string
		if nn := f["name"]; nn != nil {
			var err error
			if s, err = text(nn); err != nil {
				r.fail(nn, a, "replaces", fmt.Errorf("%s: %w", what, err))
				continue
			}
		}
		switch s {
		case "":
			r.fail(en, a, "replaces", fmt.Errorf("%s: should not have an empty replaces entry", what))
		case own:
			r.fail(en, a, "replaces", fmt.Errorf("%s: replaces should not contain name of same descriptor (%q)", what, s))
		default:
			names = append(names, s)
		}
	}
	return names
}
