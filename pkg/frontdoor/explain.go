package frontdoor

import (
	"fmt"
	"strings"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

// Explanation is what Explain found: the descriptors a front door builds
// for a request and the rule each one hits.
type Explanation struct {
	Policy *policy.Policy
	Door   *spec.Door
	Domain *spec.Domain
	// Attributes are the request's as the descriptors read them, its path
	// normalised (spec.Door.Target); SentPath is the path as sent.
	Attributes *spec.Attributes
	SentPath   string
	Items      []ExplainedDescriptor
}

// ExplainedDescriptor is one descriptor of an Explanation.
type ExplainedDescriptor struct {
	Spec *spec.Descriptor
	// Skipped says what the request lacks; the descriptor is not sent.
	Skipped string
	// Cost is the hits_addend header's value when HasCost; CostErr when the
	// header holds no whole number (the request is refused).
	Cost    uint64
	HasCost bool
	CostErr error
	// Explanation is the rule the descriptor matches (nil when skipped).
	*policy.Explanation
}

// Explain is `tokengate explain --front-door`: the descriptors the named
// front door of p builds for a request in domain ("" for the front door's
// default or only domain), and the rule each one hits.
func Explain(p *policy.Policy, door, domain string, a *spec.Attributes) (*Explanation, error) {
	fd := p.FrontDoor(door)
	if fd == nil {
		return nil, fmt.Errorf("the policy has no front_doors.%s section", door)
	}
	d := fd.Domain(domain)
	if d == nil {
		if domain == "" {
			return nil, fmt.Errorf("front door %s serves several domains (%s): name one with --domain", door, strings.Join(fd.Domains(), ", "))
		}
		return nil, fmt.Errorf("front door %s does not serve domain %q (it serves %s)", door, domain, strings.Join(fd.Domains(), ", "))
	}
	sent, target := a.Path, *a
	target.Path = fd.Target(sent)
	a = &target
	e := &Explanation{Policy: p, Door: fd, Domain: d, Attributes: a, SentPath: sent}
	for _, ds := range d.Descriptors {
		it := ExplainedDescriptor{Spec: ds}
		entries, missing := ds.Build(a, nil)
		if missing != "" {
			it.Skipped = missing
		} else {
			it.Cost, it.HasCost, it.CostErr = ds.HitsAddend(a)
			it.Explanation = p.Explain(d.Name, policyEntries(entries))
		}
		e.Items = append(e.Items, it)
	}
	return e, nil
}

func policyEntries(entries []spec.Entry) []policy.Entry {
	out := make([]policy.Entry, len(entries))
	for i, e := range entries {
		out[i] = policy.Entry(e)
	}
	return out
}

// String formats the explanation for a terminal.
func (e *Explanation) String() string {
	var b strings.Builder
	fd := e.Door
	fmt.Fprintf(&b, "front door %s (%s:%d), domain %q, trusted_proxy_hops %d", fd.Name, e.Policy.Name(), fd.Line, e.Domain.Name, fd.TrustedProxyHops)
	if fd.OriginalRequest != spec.OriginalUnset {
		fmt.Fprintf(&b, ", original request from %s headers", fd.OriginalRequest)
	}
	a := e.Attributes
	path := orDash(a.Path)
	if e.SentPath != a.Path {
		path += fmt.Sprintf(" (normalised from %q)", e.SentPath)
	}
	fmt.Fprintf(&b, "\nrequest: remote_address=%s method=%s path=%s host=%s scheme=%s\n",
		orDash(a.RemoteAddress), orDash(a.Method), path, orDash(a.Host), orDash(a.Scheme))
	sent := 0
	for i, it := range e.Items {
		fmt.Fprintf(&b, "\ndescriptor %d (%s:%d): ", i+1, e.Policy.Name(), it.Spec.Line)
		if it.Skipped != "" {
			fmt.Fprintf(&b, "skipped: the request has no %s\n", it.Skipped)
			continue
		}
		sent++
		for j, en := range it.Entries {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(en.Key + "=" + en.Value)
		}
		switch {
		case it.CostErr != nil:
			fmt.Fprintf(&b, "\n  refused: %v\n", it.CostErr)
			continue
		case it.HasCost:
			fmt.Fprintf(&b, "\n  cost %d (header %s)", it.Cost, it.Spec.HitsAddendHeader)
		}
		b.WriteString("\n")
		text := strings.Replace(it.Explanation.String(), "the request is not limited (Envoy gets OK)", "this descriptor limits nothing", 1)
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n")[1:] {
			b.WriteString("  " + line + "\n")
		}
	}
	if sent == 0 {
		b.WriteString("\nno descriptor applies: the request is allowed and nothing is consumed\n")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
