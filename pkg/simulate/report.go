package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/tokengate/tokengate/pkg/policy"
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
	Domain   string `json:"domain"`
	Rule     string `json:"rule"`
	Shadow   bool   `json:"shadow"`
	Charge   string `json:"charge"` // before_request, after_response, every_hit; "unlimited"
	Allowed  int64  `json:"allowed"`
	Rejected int64  `json:"rejected"`
	Refused  int64  `json:"refused"`
	Blocked  int64  `json:"blocked"`
	Refunds  int64  `json:"refunds"`
	Checks   int64  `json:"checks"`
	InDebt   int64  `json:"in_debt"`
	Reports  int64  `json:"reports"`
	Charged  int64  `json:"charged"`
	Forgiven int64  `json:"forgiven"`
	Lowest   *int64 `json:"lowest"` // null: an unlimited rule
	// FirstDry is seconds from the start, null: never.
	FirstDry *string `json:"first_dry"`
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
			rep.Rules[j] = RuleReport{Domain: rr.Domain, Rule: rr.Rule, Shadow: rr.Shadow, Charge: charge(rr),
				Allowed: rr.Allowed, Rejected: rr.Rejected, Refused: rr.Refused, Blocked: rr.Blocked, Refunds: rr.Refunds,
				Checks: rr.Checks, InDebt: rr.InDebt, Reports: rr.Reports, Charged: rr.Charged, Forgiven: rr.Forgiven}
			if !rr.Unlimited {
				rep.Rules[j].Lowest = &rr.Lowest
			}
			if rr.FirstDry >= 0 {
				s := FormatSeconds(rr.FirstDry)
				rep.Rules[j].FirstDry = &s
			}
		}
	}
	return rep
}

// charge is how rr's rule charges, as the policy writes it, or
// "unlimited".
func charge(rr *RuleResult) string {
	if rr.Unlimited {
		return "unlimited"
	}
	return rr.Charge.String()
}

// WriteJSON writes the report as one indented JSON document.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(NewReport(results))
}

// WriteText writes the results as an aligned table, one row per rule and
// the policies side by side ("-": the rule is not in that policy or
// decided nothing there). When a rule of any of them is charged after the
// response or every hit, each policy also has the columns of its checks,
// checks rejected in debt, reports, tokens charged and forgiven, and
// lowest balance.
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
	cols := textColumns
	if postPaid(results) {
		cols = append(cols[:len(cols):len(cols)], postPaidColumns...)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(results) > 1 {
		row := []string{"", ""}
		for i := range results {
			row = append(row, fmt.Sprintf("policy %d", i+1))
			row = append(row, make([]string, len(cols)-1)...)
		}
		fmt.Fprintln(tw, strings.TrimRight(strings.Join(row, "\t"), "\t"))
	}
	head := []string{"domain", "rule"}
	for range results {
		for _, c := range cols {
			head = append(head, c.head)
		}
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
			if rr != nil && rr.Shadow {
				row[1] = k.rule + " (shadow)"
			}
			for _, c := range cols {
				if rr == nil {
					row = append(row, "-")
				} else {
					row = append(row, c.cell(rr))
				}
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// column is a column of the text table: its head and a rule's cell.
type column struct {
	head string
	cell func(*RuleResult) string
}

func count(f func(*RuleResult) int64) func(*RuleResult) string {
	return func(rr *RuleResult) string { return strconv.FormatInt(f(rr), 10) }
}

// textColumns are every table's, postPaidColumns those added when a
// rule is charged after the response or every hit.
var (
	textColumns = []column{
		{"allowed", count(func(rr *RuleResult) int64 { return rr.Allowed })},
		{"rejected", count(func(rr *RuleResult) int64 { return rr.Rejected })},
		{"refused", count(func(rr *RuleResult) int64 { return rr.Refused })},
		{"blocked", count(func(rr *RuleResult) int64 { return rr.Blocked })},
		{"refunds", count(func(rr *RuleResult) int64 { return rr.Refunds })},
		{"first dry", func(rr *RuleResult) string {
			if rr.FirstDry < 0 {
				return "-"
			}
			return FormatSeconds(rr.FirstDry) + "s"
		}},
	}
	postPaidColumns = []column{
		{"checks", count(func(rr *RuleResult) int64 { return rr.Checks })},
		{"in debt", count(func(rr *RuleResult) int64 { return rr.InDebt })},
		{"reports", count(func(rr *RuleResult) int64 { return rr.Reports })},
		{"charged", count(func(rr *RuleResult) int64 { return rr.Charged })},
		{"forgiven", count(func(rr *RuleResult) int64 { return rr.Forgiven })},
		{"lowest", func(rr *RuleResult) string {
			if rr.Unlimited {
				return "-"
			}
			return strconv.FormatInt(rr.Lowest, 10)
		}},
	}
)

// postPaid says whether a rule of the results is charged after the
// response or every hit.
func postPaid(results []*Result) bool {
	for _, r := range results {
		for _, rr := range r.Rules {
			if !rr.Unlimited && rr.Charge != policy.BeforeRequest {
				return true
			}
		}
	}
	return false
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
