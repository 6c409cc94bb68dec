package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

// TestTextSideBySide: with two policies, one row per rule of either, "-"
// where a policy has no such rule.
func TestTextSideBySide(t *testing.T) {
	other := strings.Replace(testPolicy, "name: per-path", "name: per-route", 1)
	trace := header + lines(4, "0,edge,user=a|path=/x,") + "2.5,edge,probe=p,\n"
	got := textOf(t, runPolicies(t, trace, parsePolicy(t, "a.yaml", testPolicy), parsePolicy(t, "b.yaml", other)))
	want := `trace t.csv: 5 requests over 2.5s
policy 1 a.yaml: 1 over limit, 0 descriptors without a rule
policy 2 b.yaml: 1 over limit, 0 descriptors without a rule

                        policy 1                                                  policy 2
domain  rule            allowed   rejected  refused  blocked  refunds  first dry  allowed  rejected  refused  blocked  refunds  first dry
edge    per-user        3         0         0        1        0        -          3        0         0        1        0        -
edge    per-path        3         1         0        0        0        0s         -        -         -        -        -        -
edge    watch (shadow)  1         0         0        0        0        -          1        0         0        0        0        -
edge    per-route       -         -         -        -        -        -          3        1         0        0        0        0s
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestTextPostPaid: beside a post-paid policy the table has the columns
// of checks, checks in debt, reports, tokens charged and forgiven, and
// the lowest balance, for either policy: issue 22's calls, pre-paid (the
// report refused, nothing charged) against post-paid (charged, -4000).
func TestTextPostPaid(t *testing.T) {
	trace := header + "0,llm,user=u,0\n0,llm,user=u,5000\n0,llm,user=u,0\n0,llm,client=c,2500\n"
	got := textOf(t, runPolicies(t, trace, prePaid(t), parsePolicy(t, "postpaid.yaml", postPaidPolicy)))
	want := `trace t.csv: 4 requests over 0s
policy 1 prepaid.yaml: 2 over limit, 0 descriptors without a rule
policy 2 postpaid.yaml: 3 over limit, 0 descriptors without a rule

                policy 1                                                                                                       policy 2
domain  rule    allowed   rejected  refused  blocked  refunds  first dry  checks  in debt  reports  charged  forgiven  lowest  allowed  rejected  refused  blocked  refunds  first dry  checks  in debt  reports  charged  forgiven  lowest
llm     tokens  2         0         1        0        0        -          2       0        0        0        0         1000    1        2         0        0        0        0s         2       1        1        5000     0         -4000
llm     hits    0         1         0        0        0        0s         0       0        0        2000     500       -1000   0        1         0        0        0        0s         0       0        0        2000     500       -1000
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// runPolicies replays the CSV trace through pols side by side.
func runPolicies(t *testing.T, trace string, pols ...*policy.Policy) []*Result {
	t.Helper()
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(trace)), pols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// textOf is WriteText of res, for trace t.csv.
func textOf(t *testing.T, res []*Result) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteText(&buf, "t.csv", res); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestJSONPostPaid: the JSON report has every rule's charge, checks,
// checks in debt, reports, tokens charged and forgiven and lowest balance
// (null for an unlimited rule, which has no bucket).
func TestJSONPostPaid(t *testing.T) {
	pol := parsePolicy(t, "p.yaml", strings.Replace(postPaidPolicy, "domains:\n  llm:\n", "domains:\n  llm:\n    - name: free\n      match: [{key: tier, value: free}]\n      unlimited: true\n", 1))
	res := runPolicies(t, header+"0,llm,client=c,0\n0,llm,client=c,2500\n0,llm,client=c,0\n0,llm,tier=free,\n", pol)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rules) != 2 {
		t.Fatalf("rules %+v", rep.Rules)
	}
	free, hits := rep.Rules[0], rep.Rules[1]
	if free.Rule != "free" || free.Charge != "unlimited" || free.Lowest != nil || free.Allowed != 1 {
		t.Errorf("free: %+v", free)
	}
	if hits.Rule != "hits" || hits.Charge != "every_hit" || hits.Checks != 2 || hits.InDebt != 1 || hits.Reports != 0 ||
		hits.Charged != 2000 || hits.Forgiven != 500 || hits.Lowest == nil || *hits.Lowest != -1000 || hits.Rejected != 2 || hits.Allowed != 1 {
		t.Errorf("hits: %+v", hits)
	}
}
