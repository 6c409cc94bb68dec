package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/internal/suggest"
)

// MaxFileSize is the largest policy file Parse accepts.
const MaxFileSize = 4 << 20

// MaxMatchEntries is the most entries a rule can match: a descriptor has
// at most that many (pkg/service refuses more), so a longer match list, or
// a reference-format tree deeper than that, could never match a request.
const MaxMatchEntries = 32

// reader walks the YAML tree of one policy file and collects every issue,
// so that a bad file is reported whole rather than one error at a time.
type reader struct {
	file      string
	refCharge Charge // how the rules of a reference file are charged
	errs      Errors
	warnings  []*Issue
}

// at is where in the file an issue is: a domain, a rule, or neither.
type at struct {
	domain, rule string
	index        int
}

func (r *reader) issue(line int, a at, field string, err error) *Issue {
	return &Issue{File: r.file, Line: line, Domain: a.domain, Rule: a.rule, Index: a.index, Field: field, Err: err}
}

// fail records an error at node n (nil: no line).
func (r *reader) fail(n *yaml.Node, a at, field string, err error) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errs = append(r.errs, r.issue(line, a, field, err))
}

func (r *reader) warn(line int, a at, field string, err error) {
	r.warnings = append(r.warnings, r.issue(line, a, field, err))
}

// document reads the file's single YAML document and returns its root, or
// nil after recording why it cannot.
func (r *reader) document(data []byte) *yaml.Node {
	if len(data) > MaxFileSize {
		r.fail(nil, at{}, "", fmt.Errorf("file is %d bytes, more than the %d allowed", len(data), MaxFileSize))
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		r.fail(nil, at{}, "", errors.New("empty file"))
		return nil
	} else if err != nil {
		r.yamlError(err)
		return nil
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("only one YAML document is allowed")
		}
		r.yamlError(err)
		return nil
	}
	if len(doc.Content) == 0 {
		r.fail(&doc, at{}, "", errors.New("empty file"))
		return nil
	}
	if alias := findAlias(&doc); alias != nil {
		r.fail(alias, at{}, "", errors.New("YAML aliases and merge keys are not supported; write each rule in full"))
		return nil
	}
	return doc.Content[0]
}

// yamlError records a parse error, taking the line out of the library's
// "yaml: line N: ..." message so that it reads like every other issue.
func (r *reader) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, perr := strconv.Atoi(num); perr == nil {
				line, msg = n, tail
			}
		}
	}
	r.errs = append(r.errs, &Issue{File: r.file, Line: line, Err: fmt.Errorf("yaml: %s", msg)})
}

func findAlias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n
	}
	for _, c := range n.Content {
		if a := findAlias(c); a != nil {
			return a
		}
	}
	return nil
}

// fields checks that n is a mapping whose keys are all known and none
// repeated, and returns the value node of each field present.
func (r *reader) fields(n *yaml.Node, a at, what string, known []string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		r.fail(n, a, "", fmt.Errorf("%s: want a mapping, got %s", what, describe(n)))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			r.fail(k, a, "", fmt.Errorf("%s: want a field name, got %s", what, describe(k)))
		case !slices.Contains(known, k.Value):
			r.fail(k, a, "", fmt.Errorf("%s: unknown field %q%s", what, k.Value, suggest.OrKnown(k.Value, known)))
		case lines[k.Value] != 0:
			r.fail(k, a, k.Value, fmt.Errorf("repeated (first at line %d)", lines[k.Value]))
		default:
			out[k.Value], lines[k.Value] = v, k.Line
		}
	}
	return out
}

// lookup returns the value of field key in mapping n, nil when absent.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "a document"
}

// text reads a scalar as a string; null reads as "".
func text(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a string, got %s", describe(n))
	}
	if n.ShortTag() == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func integer(n *yaml.Node) (int64, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && isDigits(strings.TrimLeft(n.Value, "+-")) {
		// YAML reads a whole number too large for int64 as a float.
		return 0, fmt.Errorf("%s does not fit in 64 bits", n.Value)
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, fmt.Errorf("want a whole number, got %s", describe(n))
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		return 0, fmt.Errorf("%s does not fit in 64 bits", n.Value)
	}
	return v, nil
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789_") == ""
}

func boolean(n *yaml.Node) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, fmt.Errorf("want true or false, got %s", describe(n))
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		return false, fmt.Errorf("want true or false, got %s", describe(n))
	}
	return v, nil
}
