package policy

// What `tokengate validate` prints: a good file's summary and warnings.

import (
	"fmt"
	"io"
	"strings"
)

// Summary is the one-line description `tokengate validate` prints for a
// good file: policy.yaml: OK: revision 3, 2 domains (edge: 5 rules (1
// post-paid), internal: 1 rule), front door forward_auth (edge), sha256
// 9f86d0...
func (p *Policy) Summary() string {
	parts := make([]string, len(p.names))
	for i, name := range p.names {
		rules := p.domains[name].rules
		parts[i] = fmt.Sprintf("%s: %s", name, plural(len(rules), "rule"))
		if n := charged(rules, AfterResponse); n > 0 {
			parts[i] += fmt.Sprintf(" (%d post-paid)", n)
		}
		for _, c := range []Charge{EveryHit, StopWhenOver} {
			if n := charged(rules, c); n > 0 {
				parts[i] += fmt.Sprintf(" (%d %s)", n, c)
			}
		}
	}
	doors := ""
	for _, fd := range p.FrontDoors() {
		doors += fmt.Sprintf(", front door %s (%s)", fd.Name, strings.Join(fd.Domains(), ", "))
	}
	return fmt.Sprintf("%s: OK: revision %d, %s (%s)%s, sha256 %s",
		p.name, p.revision, plural(len(p.names), "domain"), strings.Join(parts, ", "), doors, p.SHA256())
}

// charged counts the limited rules of rules charged as c says.
func charged(rules []*Rule, c Charge) int {
	n := 0
	for _, r := range rules {
		if r.HasBucket() && r.Charge == c {
			n++
		}
	}
	return n
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Validate is `tokengate validate FILE`: it checks the policy file data and,
// when it is good, writes its Summary and then its warnings to w, one a
// line. A bad file writes nothing and returns the Errors, every issue of
// the file.
func Validate(w io.Writer, file string, data []byte) error {
	return ValidateFiles(w, file, []File{{Name: file, Data: data}})
}

// ValidateFiles is Validate for a set of files (a directory, name).
func ValidateFiles(w io.Writer, name string, files []File) error {
	p, err := ParseFiles(name, files)
	if err != nil {
		return err
	}
	lines := []string{p.Summary()}
	for _, is := range p.warnings {
		lines = append(lines, "warning: "+is.Error())
	}
	_, err = io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}
