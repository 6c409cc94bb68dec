package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is the JSON form of a Result (`tokengate simulate --format json`;
// docs/simulate.md defines the schema). Compare is the second policy's, with
// --compare.
type Report struct {
	Policy    string       `json:"policy"`
	Requests  int64        `json:"requests"`
	OverLimit int64        `json:"over_limit"`
	NoRule    int64        `json:"no_rule"`
	End       string       `json:"end"`
	Rules     []RuleReport `json:"rules"`
	Compare   *Report      `json:"compare,omitempty"`
}

// RuleReport is one rule of a Report.
type RuleReport struct {
	Domain   string  `json:"domain"`
	Rule     string  `json:"rule"`
	Shadow   bool    `json:"shadow"`
	Allowed  int64   `json:"allowed"`
	Rejected int64   `json:"rejected"`
	Refused  int64   `json:"refused"`
	Blocked  int64   `json:"blocked"`
	Refunds  int64   `json:"refunds"`
	FirstDry *string `json:"first_dry"` // seconds from the start, null: never
}

// NewReport is the report of results[0], with results[1] as its Compare
// when there is one.
func NewReport(results []*Result) *Report {
	var rep *Report
	for i := len(results) - 1; i >= 0; i-- {
		r := results[i]
		rep = &Report{Policy: r.Policy, Requests: r.Requests, OverLimit: r.OverLimit, NoRule: r.NoRule,
			End: FormatSeconds(r.End), Rules: make([]RuleReport, len(r.Rules)), Compare: rep}
		for j, rr := range r.Rules {
			rep.Rules[j] = RuleReport{Domain: rr.Domain, Rule: rr.Rule, Shadow: rr.Shadow, Allowed: rr.Allowed,
				Rejected: rr.Rejected, Refused: rr.Refused, Blocked: rr.Blocked, Refunds: rr.Refunds}
			if rr.FirstDry >= 0 {
				s := FormatSeconds(rr.FirstDry)
				rep.Rules[j].FirstDry = &s
			}
		}
	}
	return rep
}

// WriteJSON writes the report as one indented JSON document.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(NewReport(results))
}

// WriteText writes the results as an aligned table, one row per rule and
// the policies side by side ("-": the rule is not in that policy or
// decided nothing there).
func WriteText(w io.Writer, trace string, results []*Result) error {
	if len(results) == 0 {
		return nil
	}
	first := results[0]
	fmt.Fprintf(w, "trace %s: %s over %ss\n", trace, plural(first.Requests, "request"), FormatSeconds(first.End))
	for i, r := range results {
		name := "policy"
		if len(results) > 1 {
			name = fmt.Sprintf("policy %d", i+1)
		}
		fmt.Fprintf(w, "%s %s: %d over limit, %s without a rule\n", name, r.Policy, r.OverLimit, plural(r.NoRule, "descriptor"))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(results) > 1 {
		row := []string{"", ""}
		for i := range results {
			row = append(row, fmt.Sprintf("policy %d", i+1), "", "", "", "", "")
		}
		fmt.Fprintln(tw, strings.TrimRight(strings.Join(row, "\t"), "\t"))
	}
	head := []string{"domain", "rule"}
	for range results {
		head = append(head, "allowed", "rejected", "refused", "blocked", "refunds", "first dry")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	byKey := make([]map[ruleKey]*RuleResult, len(results))
	for i, r := range results {
		byKey[i] = make(map[ruleKey]*RuleResult, len(r.Rules))
		for _, rr := range r.Rules {
			byKey[i][ruleKey{rr.Domain, rr.Rule}] = rr
		}
	}
	for _, k := range ruleKeys(results) {
		row := []string{k.domain, k.rule}
		for i := range results {
			rr := byKey[i][k]
			if rr == nil {
				row = append(row, "-", "-", "-", "-", "-", "-")
				continue
			}
			if rr.Shadow {
				row[1] = k.rule + " (shadow)"
			}
			dry := "-"
			if rr.FirstDry >= 0 {
				dry = FormatSeconds(rr.FirstDry) + "s"
			}
			for _, n := range []int64{rr.Allowed, rr.Rejected, rr.Refused, rr.Blocked, rr.Refunds} {
				row = append(row, strconv.FormatInt(n, 10))
			}
			row = append(row, dry)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

type ruleKey struct{ domain, rule string }

// ruleKeys are the rules of every result, each once: the first result's
// in its order, then those only the others decided.
func ruleKeys(results []*Result) []ruleKey {
	var keys []ruleKey
	seen := map[ruleKey]bool{}
	for _, r := range results {
		for _, rr := range r.Rules {
			if k := (ruleKey{rr.Domain, rr.Rule}); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}
