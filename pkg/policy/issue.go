package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Issue is one problem found in a policy file, located as precisely as the
// file allows. Parse reports errors as Issues (in an Errors) and returns
// warnings as Issues too (Policy.Warnings).
type Issue struct {
	File   string
	Line   int    // 1-based; 0 when the problem has no line (an empty file)
	Domain string // "" outside a domain
	Rule   string // the rule's name; "" outside a rule or when it has none
	Index  int    // 1-based position of the rule in its domain; 0 outside a rule
	Field  string // "" when the problem is not in one field
	Err    error
}

// Error formats the issue as
// `policy.yaml:14: domain "edge" rule "search": refill: <what is wrong>`.
func (i *Issue) Error() string {
	var b strings.Builder
	b.WriteString(i.File)
	if i.Line > 0 {
		fmt.Fprintf(&b, ":%d", i.Line)
	}
	b.WriteString(": ")
	switch {
	case i.Domain != "" && i.Rule != "":
		fmt.Fprintf(&b, "domain %q rule %q: ", i.Domain, i.Rule)
	case i.Domain != "" && i.Index > 0:
		fmt.Fprintf(&b, "domain %q rule #%d: ", i.Domain, i.Index)
	case i.Domain != "":
		fmt.Fprintf(&b, "domain %q: ", i.Domain)
	}
	msg := i.Err.Error()
	// Errors of pkg/bucket may start with the field already
	// (`on_resize "x": ...`); do not say it twice.
	if i.Field != "" && !strings.HasPrefix(msg, i.Field+" ") {
		b.WriteString(i.Field)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	return b.String()
}

// Unwrap returns the underlying error.
func (i *Issue) Unwrap() error { return i.Err }

// Errors is every error found in one policy file, in file order. Parse and
// Compiler.Compile return it (as an error) for a file that does not
// validate; use errors.As to get at the Issues.
type Errors []*Issue

// Error joins the issues, one a line.
func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, is := range e {
		lines[i] = is.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the issues, for errors.Is and errors.As.
func (e Errors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, is := range e {
		errs[i] = is
	}
	return errs
}

// MaxBriefIssues is how many issues Brief names before it counts the rest,
// and MaxBriefLine how many bytes of each it keeps.
const (
	MaxBriefIssues = 20
	MaxBriefLine   = 512
)

// Brief is err's text for a log line or an xDS NACK: of a policy's Errors
// the first MaxBriefIssues, each cut to MaxBriefLine bytes, and a count of
// the rest, where Error names them all (tokengate validate prints every
// one). A config with 20,000 errors is a few KB this way, not megabytes on
// every replica.
func Brief(err error) string {
	var errs Errors
	if !errors.As(err, &errs) {
		return cut(err.Error(), MaxBriefIssues*MaxBriefLine)
	}
	n := min(len(errs), MaxBriefIssues)
	lines := make([]string, n, n+1)
	for i, is := range errs[:n] {
		lines[i] = cut(is.Error(), MaxBriefLine)
	}
	if more := len(errs) - n; more > 0 {
		lines = append(lines, fmt.Sprintf("... and %d more errors (tokengate validate lists them all)", more))
	}
	return strings.Join(lines, "\n")
}

// cut keeps the first max bytes of s, saying how long it was.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:max], ""), len(s))
}
