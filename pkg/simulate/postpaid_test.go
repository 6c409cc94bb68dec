package simulate

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

// postPaidPolicy has the rules of docs/policy.md's tables: a budget of
// 1000 tokens an hour charged after the response (max_debt 100000), the
// same charged every hit (max_debt the capacity), a pre-paid path limit,
// a budget with reservations, and one of two limits.
const postPaidPolicy = `request_id_key: request_id
domains:
  llm:
    - name: tokens
      match: [{key: user}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
      max_debt: 100000
    - name: hits
      match: [{key: client}]
      capacity: 1000
      refill: 1000/h
      charge: every_hit
    - name: per-path
      match: [{key: path}]
      capacity: 1
      refill: 1/h
    - name: reserved
      match: [{key: team}]
      capacity: 1000
      refill: 1/h
      charge: after_response
      reserve: 400
      reserve_ttl: 10s
    - name: banded
      match: [{key: org}]
      charge: after_response
      max_debt: 500
      limits:
        - {capacity: 1000, refill: 1000/h}
        - {capacity: 300, refill: 300/m}
`

// prePaid is postPaidPolicy with its rule tokens charged before the
// request (and no max_debt), as prepaid.yaml.
func prePaid(t *testing.T) *policy.Policy {
	return parsePolicy(t, "prepaid.yaml", strings.Replace(postPaidPolicy, "      charge: after_response\n      max_debt: 100000\n", "", 1))
}

// runPostPaid replays trace through postPaidPolicy (and, with Hot, follows
// that many buckets) and returns the result and its rules by name.
func runPostPaid(t *testing.T, trace string, hot int) (*Result, map[string]*RuleResult) {
	t.Helper()
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(trace)), []*policy.Policy{parsePolicy(t, "p.yaml", postPaidPolicy)}, RunOptions{Hot: hot})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*RuleResult{}
	for _, rr := range res[0].Rules {
		byName[rr.Rule] = rr
	}
	return res[0], byName
}

// counts is what a test asserts of a rule: the five counts, then checks,
// in debt, reports, charged, forgiven, lowest.
func counts(rr *RuleResult) string {
	if rr == nil {
		return "none"
	}
	return fmt.Sprintf("allowed %d rejected %d refused %d blocked %d refunds %d; checks %d in debt %d reports %d; charged %d forgiven %d lowest %d",
		rr.Allowed, rr.Rejected, rr.Refused, rr.Blocked, rr.Refunds, rr.Checks, rr.InDebt, rr.Reports, rr.Charged, rr.Forgiven, rr.Lowest)
}

func wantCounts(t *testing.T, rules map[string]*RuleResult, rule, want string) {
	t.Helper()
	if got := counts(rules[rule]); got != want {
		t.Errorf("rule %s:\n got %s\nwant %s", rule, got, want)
	}
}

// TestPostPaidIssueTable is issue 22's table on capacity 1000, 1000/h: a
// check (OK), a report of 5000 (charged: -4000, OVER_LIMIT), a check (in
// debt: OVER_LIMIT). 4001 tokens are 14403.6 s at 1000/h: a check a
// nanosecond before finds 0.99... tokens (rejected, no longer in debt),
// one at 14403.6 s passes: the retry-after the answer gives, to the ns.
func TestPostPaidIssueTable(t *testing.T) {
	res, rules := runPostPaid(t, header+"0,llm,user=u,0\n0,llm,user=u,5000\n0,llm,user=u,0\n"+
		"14403.599999999,llm,user=u,0\n14403.6,llm,user=u,\n", 1)
	wantCounts(t, rules, "tokens", "allowed 2 rejected 3 refused 0 blocked 0 refunds 0; checks 4 in debt 1 reports 1; charged 5000 forgiven 0 lowest -4000")
	if res.OverLimit != 3 || res.Requests != 5 {
		t.Errorf("over limit %d of %d, want 3 of 5", res.OverLimit, res.Requests)
	}
	if rr := rules["tokens"]; rr.FirstDry != 0 || rr.Charge != policy.AfterResponse {
		t.Errorf("first dry %d, charge %v", rr.FirstDry, rr.Charge)
	}
	if b := res.Buckets; len(b) != 1 || b[0].MaxDebt != 100000 || b[0].Capacity != 1000 || fmt.Sprint(b[0].Tokens) != "[{0 -4000} {14403 0}]" {
		t.Errorf("followed %+v", b)
	}
}

// TestPostPaidForgiven: a report beyond max_debt is charged to -max_debt
// and the rest forgiven: on the every_hit rule (max_debt the capacity) as
// docs/policy.md's table, a check passes, a report of 5000 is charged to
// -1000 with 3000 forgiven, and a check (a hit of 0) is OVER_LIMIT while
// the balance is below zero: until 1000 tokens are back, 3600 s.
func TestPostPaidForgiven(t *testing.T) {
	_, rules := runPostPaid(t, header+"0,llm,client=c,0\n0,llm,client=c,5000\n0,llm,client=c,0\n"+
		"3599.999999999,llm,client=c,0\n3600,llm,client=c,0\n", 0)
	wantCounts(t, rules, "hits", "allowed 2 rejected 3 refused 0 blocked 0 refunds 0; checks 4 in debt 2 reports 0; charged 2000 forgiven 3000 lowest -1000")
}

// TestPostPaidBands: a report charges each limit of a rule of several,
// down to its own -max_debt: 2500 takes 1000 to -500 (2000 charged, 1000
// forgiven) and 300 to -500 (800 charged, 1700 forgiven). The rule has
// charged what each limit was charged at least, 800, and forgiven the
// most any forgave, 1700, as tokengate_forgiven_tokens_total counts it.
func TestPostPaidBands(t *testing.T) {
	_, rules := runPostPaid(t, header+"0,llm,org=o,0\n0,llm,org=o,2500\n1,llm,org=o,0\n", 0)
	wantCounts(t, rules, "banded", "allowed 1 rejected 2 refused 0 blocked 0 refunds 0; checks 2 in debt 1 reports 1; charged 800 forgiven 1700 lowest -500")
}

// TestPostPaidNotBlocked: a report is charged whatever the rest of its
// request says. With per-path's one token spent, a request of a report
// (per descriptor hits: 300 for user, none for path, so per-path's cost
// of 1) is refused, and still its report is charged and counted as its
// own answer says, never as blocked; a report left in debt answers
// OVER_LIMIT, and a pre-paid descriptor of its request is charged all
// the same.
func TestPostPaidNotBlocked(t *testing.T) {
	res, rules := runPostPaid(t, header+
		"0,llm,path=/a,\n"+ // per-path /a: 1 -> 0
		"0,llm,user=u|path=/a,300|\n"+ // refused by /a: the report of 300 charged (700), OK
		"0,llm,user=u|path=/b,900|\n"+ // the report: -200, OVER_LIMIT; /b charged 1 all the same
		"0,llm,user=u|path=/c,0|\n", // a check in debt: refused, /c not charged
		0)
	wantCounts(t, rules, "tokens", "allowed 1 rejected 2 refused 0 blocked 0 refunds 0; checks 1 in debt 1 reports 2; charged 1200 forgiven 0 lowest -200")
	wantCounts(t, rules, "per-path", "allowed 2 rejected 1 refused 0 blocked 1 refunds 0; checks 0 in debt 0 reports 0; charged 2 forgiven 0 lowest 0")
	if res.OverLimit != 3 {
		t.Errorf("over limit %d, want 3", res.OverLimit)
	}
}

// TestReservations: reserve 400 of 1000 (refill 1/h: no whole token
// refills in the trace), reserve_ttl 10 s. a and b hold 400 each, c finds
// 200 and is rejected, a's retried check is answered from its first (it
// holds nothing more), d a nanosecond before the TTL still finds 200; at
// 10 s both reservations return before e holds 400 (600); a's report
// after its expiry is a plain report of 100 (500); e's report of 50
// settles e: 350 back (850); b's report of 1300 after its expiry takes
// the bucket to -450.
func TestReservations(t *testing.T) {
	res, rules := runPostPaid(t, header+
		"0,llm,request_id=a|team=t,\n"+
		"0,llm,request_id=b|team=t,|0\n"+
		"0,llm,request_id=c|team=t,\n"+
		"0,llm,request_id=a|team=t,\n"+
		"9.999999999,llm,request_id=d|team=t,\n"+
		"10,llm,request_id=e|team=t,\n"+
		"11,llm,request_id=a|team=t,|100\n"+
		"11,llm,request_id=e|team=t,|50\n"+
		"12,llm,request_id=b|team=t,1300\n", 1)
	wantCounts(t, rules, "reserved", "allowed 6 rejected 3 refused 0 blocked 0 refunds 0; checks 6 in debt 0 reports 3; charged 1450 forgiven 0 lowest -450")
	if b := res.Buckets; len(b) != 1 || fmt.Sprint(b[0].Tokens) != "[{0 200} {9 200} {10 600} {11 500} {12 -450}]" {
		t.Errorf("followed %+v", b)
	}
	if res.NoRule != 0 {
		t.Errorf("the request-id descriptors counted as %d without a rule", res.NoRule)
	}
}

// TestComparePrePaidPostPaid: the issue's calls through a pre-paid budget
// and the post-paid one side by side. Pre-paid: the checks pass (cost 0)
// and the report of 5000, above the capacity, is refused and charges
// nothing, so the budget is never enforced. Post-paid: the report is
// charged, the next check refused.
func TestComparePrePaidPostPaid(t *testing.T) {
	res := runPolicies(t, header+"0,llm,user=u,0\n0,llm,user=u,5000\n0,llm,user=u,0\n", prePaid(t), parsePolicy(t, "postpaid.yaml", postPaidPolicy))
	pre, post := res[0].Rules[0], res[1].Rules[0]
	if got, want := counts(pre), "allowed 2 rejected 0 refused 1 blocked 0 refunds 0; checks 2 in debt 0 reports 0; charged 0 forgiven 0 lowest 1000"; got != want {
		t.Errorf("pre-paid:\n got %s\nwant %s", got, want)
	}
	if got, want := counts(post), "allowed 1 rejected 2 refused 0 blocked 0 refunds 0; checks 2 in debt 1 reports 1; charged 5000 forgiven 0 lowest -4000"; got != want {
		t.Errorf("post-paid:\n got %s\nwant %s", got, want)
	}
	if res[0].OverLimit != 1 || res[1].OverLimit != 2 {
		t.Errorf("over limit: pre-paid %d, post-paid %d; want 1, 2", res[0].OverLimit, res[1].OverLimit)
	}
}

// TestHotBands: each limit of a rule of several is a bucket of its own,
// followed with its own capacity, max_debt and balance, whichever limit
// decided: a report of 100 leaves 900 of 1000 and 200 of 300 (which
// decides, the fewer left), and a second later 900 and 205 (300/m).
func TestHotBands(t *testing.T) {
	res, _ := runPostPaid(t, header+"0,llm,org=o,100\n1,llm,org=o,0\n", 2)
	got := map[string]string{}
	for _, b := range res.Buckets {
		got[b.Label] = fmt.Sprintf("capacity %d max_debt %d decisions %d tokens %v", b.Capacity, b.MaxDebt, b.Decisions, b.Tokens)
	}
	want := map[string]string{
		`llm/banded["o"] limits[1]`: "capacity 1000 max_debt 500 decisions 2 tokens [{0 900} {1 900}]",
		`llm/banded["o"] limits[2]`: "capacity 300 max_debt 500 decisions 2 tokens [{0 200} {1 205}]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("followed:\n%v\nwant\n%v", got, want)
	}
}
