package simulate

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

const testPolicy = `domains:
  edge:
    - name: per-user
      match: [{key: user}]
      capacity: 10
      refill: 1/s
    - name: per-path
      match: [{key: path}]
      capacity: 3
      refill: 1/s
    - name: big
      match: [{key: tenant}]
      capacity: 5
      refill: 1/s
    - name: watch
      match: [{key: probe}]
      capacity: 2
      refill: 1/m
      shadow: true
    - name: health
      match: [{key: health}]
      unlimited: true
`

func parsePolicy(t testing.TB, name, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runTrace replays a trace through testPolicy and returns its rules by name.
func runTrace(t *testing.T, trace string) (*Result, map[string]RuleResult) {
	t.Helper()
	res, err := Run(context.Background(), BytesTrace("trace.csv", []byte(trace)), []*policy.Policy{parsePolicy(t, "p.yaml", testPolicy)}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]RuleResult{}
	for _, rr := range res[0].Rules {
		c := *rr
		c.Series, c.order = nil, 0
		byName[rr.Rule] = c
	}
	return res[0], byName
}

// lines is a CSV trace: the header, then n copies of line.
func lines(n int, line string) string { return strings.Repeat(line+"\n", n) }

const header = "t,domain,entries,hits\n"

func rule(name string, allowed, rejected, refused, blocked, refunds, firstDry int64) RuleResult {
	return RuleResult{Domain: "edge", Rule: name, Shadow: name == "watch", Allowed: allowed, Rejected: rejected,
		Refused: refused, Blocked: blocked, Refunds: refunds, FirstDry: firstDry}
}

func check(t *testing.T, got map[string]RuleResult, want ...RuleResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d rules decided, want %d: %+v", len(got), len(want), got)
	}
	for _, w := range want {
		g := got[w.Rule]
		// The counts of every rule; those of tokens apart (tokens).
		g.Charge, g.Unlimited, g.Checks, g.InDebt, g.Reports, g.Charged, g.Forgiven, g.Lowest = 0, false, 0, 0, 0, 0, 0, 0
		if !reflect.DeepEqual(g, w) {
			t.Errorf("rule %s:\n got %+v\nwant %+v", w.Rule, g, w)
		}
	}
}

// TestBurstAndRefill: capacity 10 refilling 1/s. 15 at t=0 allow 10; one
// more a nanosecond before the first token is back is rejected, one at
// exactly 1 s allowed.
func TestBurstAndRefill(t *testing.T) {
	res, got := runTrace(t, header+lines(15, "0,edge,user=a,")+"0.999999999,edge,user=a,\n1.0,edge,user=a,\n")
	check(t, got, rule("per-user", 11, 6, 0, 0, 0, 0))
	if res.Requests != 17 || res.OverLimit != 6 || res.End != 1e9 {
		t.Errorf("requests %d, over limit %d, end %d", res.Requests, res.OverLimit, res.End)
	}
	series := res.Rules[0].Series
	if want := []Second{{0, 10, 6}, {1, 1, 0}}; fmt.Sprint(series) != fmt.Sprint(want) {
		t.Errorf("series %v, want %v", series, want)
	}
}

// TestFirstDry is the instant the last token went, not the first rejection.
func TestFirstDry(t *testing.T) {
	_, got := runTrace(t, header+lines(9, "0,edge,user=a,")+"2.5,edge,user=a,\n2.5,edge,user=a,\n2.5,edge,user=a,\n")
	// 9 at 0 leave 1; by 2.5 s, 3 (1 + 2.5 refilled, whole): 3 allowed, the last leaves 0.
	check(t, got, rule("per-user", 12, 0, 0, 0, 0, 2_500_000_000))
}

// TestTwoRulesAllOrNothing: per-path (capacity 3) runs dry first; the 4th
// request is rejected by it and per-user is charged nothing, so per-user
// still has 7 tokens for requests of its own.
func TestTwoRulesAllOrNothing(t *testing.T) {
	_, got := runTrace(t, header+lines(4, "0,edge,user=b|path=/x,")+lines(8, "0,edge,user=b,"))
	check(t, got,
		rule("per-user", 10, 1, 0, 1, 0, 0),
		rule("per-path", 3, 1, 0, 0, 0, 0))
}

// TestRefund: a refund of 4 to an empty bucket lets exactly 4 more through.
func TestRefund(t *testing.T) {
	_, got := runTrace(t, header+lines(10, "0,edge,user=c,")+"0,edge,user=c,-4\n"+lines(5, "0,edge,user=c,"))
	check(t, got, rule("per-user", 14, 1, 0, 0, 1, 0))
}

// TestRefused: a cost above max_cost (by default the capacity) or an
// over-long value is refused before the store and charges nothing, not
// even the other descriptors of its request.
func TestRefused(t *testing.T) {
	long := strings.Repeat("v", 4097)
	_, got := runTrace(t, header+"0,edge,user=d,11\n0,edge,tenant=t,6\n0,edge,tenant=t,101\n0,edge,tenant="+long+",\n"+
		"0,edge,path=/r|tenant="+long+",\n"+lines(5, "0,edge,tenant=t,1")+"0,edge,user=d|tenant=t,1\n"+lines(10, "0,edge,user=d,"))
	check(t, got,
		rule("per-user", 10, 0, 1, 1, 0, 0),
		rule("per-path", 0, 0, 0, 1, 0, -1),
		rule("big", 5, 1, 4, 0, 0, 0))
}

// TestShadowUnlimitedNoRule: a shadow rule's rejections are counted but
// never answered; an unlimited rule allows all; descriptors without a rule
// are counted apart.
func TestShadowUnlimitedNoRule(t *testing.T) {
	res, got := runTrace(t, header+lines(3, "0,edge,probe=p;x=1|probe=p,")+lines(3, "0,edge,probe=p,")+lines(2, "5,edge,health=h,")+"6,other,user=a,\n")
	check(t, got,
		rule("watch", 2, 4, 0, 0, 0, 0),
		rule("health", 2, 0, 0, 0, 0, -1))
	if res.OverLimit != 0 || res.NoRule != 4 || res.Requests != 9 {
		t.Errorf("over limit %d, no rule %d, requests %d", res.OverLimit, res.NoRule, res.Requests)
	}
}

// TestShadowAllOrNothing: two shadow descriptors decide together, apart
// from the enforced ones.
func TestShadowAllOrNothing(t *testing.T) {
	_, got := runTrace(t, header+lines(2, "0,edge,probe=p,")+"0,edge,probe=q|probe=p|user=e,\n")
	check(t, got,
		rule("watch", 2, 1, 0, 1, 0, 0),
		rule("per-user", 1, 0, 0, 0, 0, -1))
}

// TestJSONLinesMatchCSV: the same trace in both formats decides the same.
func TestJSONLinesMatchCSV(t *testing.T) {
	csv := header + lines(12, "0,edge,user=a|path=/x,") + "1.5,edge,user=a,-2\n2,edge,probe=p,3\n"
	var js strings.Builder
	for range 12 {
		js.WriteString(`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}],[{"key":"path","value":"/x"}]]}` + "\n")
	}
	js.WriteString(`{"t":1.5,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]],"hits":-2}` + "\n\n")
	js.WriteString(`{"t":"2","domain":"edge","descriptors":[[{"key":"probe","value":"p"}]],"hits":3,"extra":"ignored"}` + "\n")
	pol := parsePolicy(t, "p.yaml", testPolicy)
	a, err := Run(context.Background(), BytesTrace("t.csv", []byte(csv)), []*policy.Policy{pol}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), BytesTrace("t.jsonl", []byte(js.String())), []*policy.Policy{pol}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ga, gb := describe(a[0]), describe(b[0]); ga != gb {
		t.Fatalf("CSV:\n%s\nJSON lines:\n%s", ga, gb)
	}
	if !strings.Contains(describe(a[0]), "per-path 3 9 0 0 0") {
		t.Errorf("unexpected counts:\n%s", describe(a[0]))
	}
}

func describe(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d %d %d\n", r.Requests, r.OverLimit, r.NoRule, r.End)
	for _, rr := range r.Rules {
		fmt.Fprintf(&b, "%s %d %d %d %d %d %d %v\n", rr.Rule, rr.Allowed, rr.Rejected, rr.Refused, rr.Blocked, rr.Refunds, rr.FirstDry, rr.Series)
	}
	return b.String()
}

// TestCompareInStep: two policies see the same requests, each on buckets
// of its own.
func TestCompareInStep(t *testing.T) {
	raised := strings.Replace(testPolicy, "capacity: 10", "capacity: 12", 1)
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(header+lines(15, "0,edge,user=a,"))),
		[]*policy.Policy{parsePolicy(t, "live.yaml", testPolicy), parsePolicy(t, "raised.yaml", raised)}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := res[0].Rules[0], res[1].Rules[0]; res[0].Policy != "live.yaml" || res[1].Policy != "raised.yaml" ||
		a.Allowed != 10 || a.Rejected != 5 || b.Allowed != 12 || b.Rejected != 3 {
		t.Fatalf("live %+v, raised %+v", a, b)
	}
}

// TestHottestBuckets: the buckets with the most decisions are followed,
// with their lowest balance per second.
func TestHottestBuckets(t *testing.T) {
	trace := header + lines(12, "0,edge,user=a,") + lines(3, "0,edge,user=b,") + "1,edge,user=b,\n" + lines(2, "3,edge,user=a,") + "3,edge,path=/p,\n"
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(trace)), []*policy.Policy{parsePolicy(t, "p.yaml", testPolicy)}, RunOptions{Hot: 2})
	if err != nil {
		t.Fatal(err)
	}
	bs := res[0].Buckets
	if len(bs) != 2 {
		t.Fatalf("%d buckets followed", len(bs))
	}
	if a := bs[0]; a.Label != `edge/per-user["a"]` || a.Capacity != 10 || a.Decisions != 14 || fmt.Sprint(a.Tokens) != "[{0 0} {3 1}]" {
		t.Errorf("hottest: %+v", a)
	}
	if b := bs[1]; b.Label != `edge/per-user["b"]` || b.Decisions != 4 || fmt.Sprint(b.Tokens) != "[{0 7} {1 7}]" {
		t.Errorf("second: %+v", b)
	}
	if res[0].Rules[0].Allowed != 16 {
		t.Errorf("counts of the first run: %+v", res[0].Rules[0])
	}
}

// TestRefusedBesideItsRule: of two descriptors of one rule, the one
// refused before the store (an over-long value) is not taken for the
// other's bucket: the bucket followed is the other's, charged nothing.
func TestRefusedBesideItsRule(t *testing.T) {
	trace := header + "0,edge,user=" + strings.Repeat("v", 4097) + "|user=a,\n"
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(trace)), []*policy.Policy{parsePolicy(t, "p.yaml", testPolicy)}, RunOptions{Hot: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rr := res[0].Rules[0]; rr.Refused != 1 || rr.Blocked != 1 || rr.Allowed != 0 {
		t.Errorf("counts %+v", rr)
	}
	if b := res[0].Buckets; len(b) != 1 || b[0].Label != `edge/per-user["a"]` || fmt.Sprint(b[0].Tokens) != "[{0 10}]" {
		t.Errorf("followed %+v", b)
	}
}

// TestHotAfterRefused: a descriptor refused for a cost above max_cost has
// its bucket checked (an item with a key of its own) but is not counted
// as a decision of it; following the hottest buckets after it still
// counts the next bucket's, and follows it.
func TestHotAfterRefused(t *testing.T) {
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(header+"0,edge,tenant=t,6\n0,edge,user=a,\n0,edge,user=a,\n")),
		[]*policy.Policy{parsePolicy(t, "p.yaml", testPolicy)}, RunOptions{Hot: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b := res[0].Buckets; len(b) != 1 || b[0].Label != `edge/per-user["a"]` || b[0].Decisions != 2 || fmt.Sprint(b[0].Tokens) != "[{0 8}]" {
		t.Errorf("followed %+v", b)
	}
}
