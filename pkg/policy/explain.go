package policy

// What `tokengate explain` prints: the rule a descriptor matches, with its
// bucket key, or why none does.

import (
	"errors"
	"fmt"
	"strings"
)

// ParseEntries reads descriptor entries written as key=value arguments, as
// `tokengate explain` takes them. The value may be empty or contain "=".
func ParseEntries(args []string) ([]Entry, error) {
	entries := make([]Entry, 0, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("descriptor entry %q: want key=value", a)
		}
		entries = append(entries, Entry{Key: k, Value: v})
	}
	if len(entries) == 0 {
		return nil, errors.New("no descriptor entries: give at least one key=value")
	}
	return entries, nil
}

// Explanation is what Explain found for one descriptor.
type Explanation struct {
	Policy  *Policy
	Domain  string
	Entries []Entry
	// Rule is the rule that matches, nil when none does.
	Rule *Rule
	// Key is the bucket key (nil for no rule or an unlimited one).
	Key []byte
	// KeyHash is Key as the service shows it (dynamic metadata, the
	// decision log, /debug/candidate): its keyed hash, which only the
	// caller that has the deployment's secret can set (pkg/keyhash); ""
	// when it has none, and String says the secret is needed.
	KeyHash string
	// Why says why no rule matched, one reason a line (empty when one did).
	Why []string
}

// Explain is `tokengate explain`: which rule of domain the descriptor
// entries match, with its bucket key, or why none does.
func (p *Policy) Explain(domain string, entries []Entry) *Explanation {
	e := &Explanation{Policy: p, Domain: domain, Entries: entries, Rule: p.Match(domain, entries)}
	switch {
	case e.Rule != nil:
		if e.Rule.HasBucket() {
			e.Key = e.Rule.AppendKey(nil, entries)
		}
	case p.domains[domain] == nil:
		e.Why = []string{fmt.Sprintf("the policy has no domain %q (domains: %s)", domain, strings.Join(p.names, ", "))}
	default:
		e.Why = p.domains[domain].whyNot(entries)
	}
	return e
}

// whyNot lists, for a descriptor no rule matches, the rules with its keys
// and the entry each one refused, or the key sequences the domain has.
func (d *domain) whyNot(entries []Entry) []string {
	var why []string
	shapes := make(map[string]bool)
	var order []string
	for _, r := range d.rules {
		if len(r.Match) != len(entries) || !sameKeys(r.Match, entries) {
			if shape := keysOf(r.Match); !shapes[shape] {
				shapes[shape] = true
				order = append(order, shape)
			}
			continue
		}
		for i, m := range r.Match {
			if !m.Matches(entries[i].Value) {
				why = append(why, fmt.Sprintf("rule %q (line %d): %s: value %q does not match %s", r.Name, r.Line, m.Key, entries[i].Value, m))
				break
			}
		}
	}
	switch {
	case len(why) > 0:
		return why
	case len(order) == 0:
		return []string{"the domain has no rules"}
	}
	return []string{fmt.Sprintf("no rule has exactly the keys %s, in that order; the domain's rules have %s",
		keysOf(entriesPatterns(entries)), strings.Join(order, " or "))}
}

func sameKeys(match []Pattern, entries []Entry) bool {
	for i, m := range match {
		if m.Key != entries[i].Key {
			return false
		}
	}
	return true
}

func entriesPatterns(entries []Entry) []Pattern {
	ps := make([]Pattern, len(entries))
	for i, e := range entries {
		ps[i] = Pattern{Key: e.Key}
	}
	return ps
}

func keysOf(match []Pattern) string {
	keys := make([]string, len(match))
	for i, m := range match {
		keys[i] = m.Key
	}
	return "(" + strings.Join(keys, ", ") + ")"
}

// String formats the explanation for a terminal.
func (e *Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q descriptor (%s)\n", e.Domain, formatEntries(e.Entries))
	r := e.Rule
	if r == nil {
		b.WriteString("matches no rule: the request is not limited (Envoy gets OK)\n")
		for _, w := range e.Why {
			fmt.Fprintf(&b, "  %s\n", w)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "matches rule %q (%s:%d)\n", r.Name, r.File, r.Line)
	if len(r.Replaces) > 0 {
		fmt.Fprintf(&b, "  replaces the limits named %s in the same request\n", strings.Join(r.Replaces, ", "))
	}
	switch {
	case r.Unlimited:
		b.WriteString("  unlimited: always OK, no bucket\n")
		return b.String()
	case r.NotLimited:
		b.WriteString("  not_limited: answered as if no rule matched (OK, no current_limit), no bucket\n")
		return b.String()
	case r.Deny:
		b.WriteString("  capacity 0: always OVER_LIMIT, no bucket\n")
	case r.Charge == AfterResponse:
		fmt.Fprintf(&b, "  %s, charge %s, max_debt %s, on_resize %s, on_store_error %s\n",
			r.bandsString(), r.Charge, r.maxDebtString(), r.OnResize, r.OnStoreError)
		b.WriteString("  post-paid: a descriptor with its own hits_addend above 0 reports usage (always charged, down to -max_debt);\n" +
			"  any other checks that a token is left, charging nothing\n")
		explainReserve(&b, r)
	case r.Charge == EveryHit:
		fmt.Fprintf(&b, "  %s, cost %d, charge %s, max_debt %s, on_resize %s, on_store_error %s\n",
			r.bandsString(), r.Cost, r.Charge, r.maxDebtString(), r.OnResize, r.OnStoreError)
		b.WriteString("  every hit: each descriptor is charged its cost, refused or not, down to -max_debt, and is OVER_LIMIT\n" +
			"  while the balance is below zero after it (hits_addend 0: a check that charges nothing)\n")
	default:
		fmt.Fprintf(&b, "  %s, cost %d, max_cost %d, on_resize %s, on_store_error %s\n",
			r.bandsString(), r.Cost, r.MaxCost, r.OnResize, r.OnStoreError)
	}
	switch {
	case len(r.Bands) <= 1:
	case r.PostPaid():
		b.WriteString("  the limits are decided together: a report is charged on every one, and the descriptor is OVER_LIMIT when any one is\n")
	default:
		b.WriteString("  the limits are decided together: a descriptor is charged on every one or on none\n")
	}
	if r.Limit.Given || r.Limit.Name != r.Name {
		fmt.Fprintf(&b, "  current_limit: %d per %s, name %q\n", r.Limit.RequestsPerUnit, r.Limit.Unit, r.Limit.Name)
	}
	if r.Shadow {
		b.WriteString("  shadow: decides and counts, always answers OK\n")
	}
	if r.HasBucket() {
		fmt.Fprintf(&b, "  bucket key: %s\n  bucket key bytes: %q\n", r.KeyString(e.Entries), e.Key)
		if !r.Plain() {
			b.WriteString("  (the rule's: each further limit's key is this one followed by \"#\" and its position, 1 for the second;\n" +
				"  a calendar budget's adds its period and the period's start, so each period is a bucket of its own)\n")
		}
		if e.KeyHash != "" {
			fmt.Fprintf(&b, "  bucket key hash: %s (key in dynamic metadata, the decision log and /debug/candidate)\n", e.KeyHash)
		} else {
			b.WriteString("  bucket key hash: needs the deployment's secret (--key-hash-secret-file)\n")
		}
	}
	return b.String()
}

func formatEntries(entries []Entry) string {
	parts := make([]string, len(entries))
	for i, en := range entries {
		parts[i] = en.Key + "=" + en.Value
	}
	return strings.Join(parts, ", ")
}
