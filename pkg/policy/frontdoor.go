package policy

// The front_doors section is compiled by package spec
// (pkg/frontdoor/spec): how requests that arrive without descriptors
// become descriptors. This file hands it the section's node while the file
// is read, with the means to read it and report problems as the rest of
// the file does, and keeps what it compiles, so that a policy and its front
// doors validate, reload and serve as one.

import (
	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
)

// FrontDoor returns the named front door (spec.ExtAuthz, spec.ForwardAuth),
// nil when the policy has none.
func (p *Policy) FrontDoor(name string) *spec.Door { return p.frontDoors[name] }

// FrontDoors returns the front doors the policy configures, in the order
// of spec.Names.
func (p *Policy) FrontDoors() []*spec.Door {
	out := make([]*spec.Door, 0, len(p.frontDoors))
	for _, name := range spec.Names {
		if fd := p.frontDoors[name]; fd != nil {
			out = append(out, fd)
		}
	}
	return out
}

// frontDoors reads the front_doors section; p's domains are read already.
func (r *reader) frontDoors(n *yaml.Node, p *Policy) {
	p.frontDoors = spec.Parse(n, sectionReader{r}, sectionRules{p})
}

// sectionReader is the reader as spec.Reader.
type sectionReader struct{ r *reader }

func (s sectionReader) Fields(n *yaml.Node, what string, known []string) map[string]*yaml.Node {
	return s.r.fields(n, at{}, what, known)
}
func (s sectionReader) Fail(n *yaml.Node, field string, err error) { s.r.fail(n, at{}, field, err) }
func (s sectionReader) Warn(line int, field string, err error)     { s.r.warn(line, at{}, field, err) }
func (s sectionReader) Failures() int                              { return len(s.r.errs) }
func (sectionReader) Text(n *yaml.Node) (string, error)            { return text(n) }
func (sectionReader) Integer(n *yaml.Node) (int64, error)          { return integer(n) }
func (sectionReader) Boolean(n *yaml.Node) (bool, error)           { return boolean(n) }
func (sectionReader) Identifier(n *yaml.Node) (string, error)      { return identifier(n) }
func (sectionReader) Describe(n *yaml.Node) string                 { return describe(n) }

// sectionRules is the policy being read as spec.Rules.
type sectionRules struct{ p *Policy }

func (s sectionRules) Domains() []string          { return s.p.names }
func (s sectionRules) HasDomain(name string) bool { return s.p.domains[name] != nil }
func (s sectionRules) RequestIDKey() string       { return s.p.requestIDKey }

func (s sectionRules) HasKeys(domain string, keys []string) bool {
	d := s.p.domains[domain]
	if d == nil {
		return false
	}
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
