package storetest

import (
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// runPostPaid runs the tests of post-paid items (store.Check and
// store.Report).
func runPostPaid(t *testing.T, newStore Factory) {
	runEach(t, newStore, []namedTest{
		{"post-paid check and report", testCheckAndReport},
		{"post-paid reports first", testReportsFirst},
		{"post-paid debt bound", testDebtBound},
		{"post-paid versions", testPostPaidVersions},
		{"post-paid replay", testPostPaidReplay},
	})
}

type namedTest struct {
	name string
	test func(*testing.T, store.Store)
}

// runEach runs each test on a fresh store.
func runEach(t *testing.T, newStore Factory, tests []namedTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, newStore(t)) })
	}
}

// PostPaidVersion returns a first version of a post-paid rule: Version's,
// with reports taking the balance down to -debt.
func PostPaidVersion(t testing.TB, id uint64, capacity int64, rate string, debt int64) *bucket.Version {
	t.Helper()
	p, err := Params(t, capacity, rate).WithMaxDebt(debt)
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(id, p, 0)
	v.Lineage().Publish(v)
	return v
}

// balance reads a bucket's whole tokens and debt with a pre-paid item of
// cost 0, which every store decides.
func balance(t testing.TB, s store.Store, now int64, key string, v *bucket.Version) (remaining, debt int64) {
	t.Helper()
	_, res := call(t, s, now, "", store.Item{Key: key, Version: v})
	return res[0].Remaining, res[0].Debt
}

func check(key string, v *bucket.Version) store.Item {
	return store.Item{Key: key, Version: v, Charge: store.Check}
}

func report(key string, v *bucket.Version, cost int64) store.Item {
	return store.Item{Key: key, Version: v, Cost: cost, Charge: store.Report}
}

// testCheckAndReport is the table: a check passes on a full bucket,
// a report larger than it is charged whole and answered as over the
// limit, and checks are refused until the debt is repaid to one token.
func testCheckAndReport(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 1000, "1000/h", 100_000)
	tick := int64(3600 * time.Millisecond) // one token
	out, res := call(t, s, 0, "", check("u", v))
	if !out.Allowed || res[0] != (store.Result{Result: bucket.Result{Allowed: true, Remaining: 1000}}) {
		t.Fatalf("check of a full bucket: %+v %+v", out, res[0])
	}
	out, res = call(t, s, 0, "", report("u", v, 5000))
	want := store.Result{Result: bucket.Result{Debt: 4000, RetryAfter: 4001 * tick}, ResetAfter: 5000 * tick}
	if !out.Allowed || res[0] != want {
		t.Fatalf("report of 5000: %+v %+v, want the report allowed through with %+v", out, res[0], want)
	}
	out, res = call(t, s, 0, "", check("u", v))
	if out.Allowed || res[0].Allowed || res[0].RetryAfter != 4001*tick || res[0].Debt != 4000 || res[0].Remaining != 0 {
		t.Fatalf("check in debt: %+v %+v", out, res[0])
	}
	if out, _ := call(t, s, 4001*tick-1, "", check("u", v)); out.Allowed {
		t.Fatal("a check passed a nanosecond before one token was back")
	}
	if out, res := call(t, s, 4001*tick, "", check("u", v)); !out.Allowed || res[0].Remaining != 1 {
		t.Fatalf("check once one token is back: %+v %+v", out, res[0])
	}
}

// testReportsFirst: a request's reports are charged first, whatever its
// other items say, and the other items are decided all or nothing on the
// balances the reports left.
func testReportsFirst(t *testing.T, s store.Store) {
	pre := Version(t, 1, 10, "1/h")
	post := PostPaidVersion(t, 2, 10, "1/h", 10)
	call(t, s, 0, "", store.Item{Key: "a", Version: pre, Cost: 9})
	out, res := call(t, s, 0, "", store.Item{Key: "a", Version: pre, Cost: 5}, report("b", post, 3))
	if out.Allowed || res[0].Allowed || !res[1].Allowed || res[1].Remaining != 7 {
		t.Fatalf("a refused pre-paid item and a report: %+v %+v", out, res)
	}
	if a, _ := balance(t, s, 0, "a", pre); a != 1 {
		t.Fatalf("the refused pre-paid item was charged: %d left, want 1", a)
	}
	if b, _ := balance(t, s, 0, "b", post); b != 7 {
		t.Fatalf("the report was not charged: %d left, want 7", b)
	}
	// The check comes first in the request, and still sees the report.
	out, res = call(t, s, 0, "", check("c", post), report("c", post, 15), store.Item{Key: "a", Version: pre, Cost: 1})
	if out.Allowed || res[0].Allowed || res[0].Debt != 5 || res[1].Debt != 5 || !res[2].Allowed || res[2].Remaining != 1 {
		t.Fatalf("a check and a report of one bucket: %+v %+v", out, res)
	}
	if a, _ := balance(t, s, 0, "a", pre); a != 1 {
		t.Fatalf("a request refused by its check charged a pre-paid item: %d left, want 1", a)
	}
	if _, debt := balance(t, s, 0, "c", post); debt != 5 {
		t.Fatalf("the report of a refused request was undone: debt %d, want 5", debt)
	}
}

// testDebtBound: a report beyond the bound charges down to it and
// forgives the rest; a bound of 0 floors the balance at zero.
func testDebtBound(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 10, "1/s", 5)
	if _, res := call(t, s, 0, "", report("a", v, 30)); res[0].Debt != 5 || res[0].Forgiven != 15 || res[0].Allowed {
		t.Fatalf("30 reported on 10 with a bound of 5: %+v", res[0])
	}
	if _, res := call(t, s, 0, "", report("a", v, 2), report("a", v, 1)); res[0].Forgiven != 2 || res[1].Forgiven != 1 {
		t.Fatalf("reports at the bound: %+v", res)
	}
	zero := PostPaidVersion(t, 2, 10, "1/s", 0)
	if _, res := call(t, s, 0, "", report("z", zero, 25)); !res[0].Allowed || res[0].Forgiven != 15 || res[0].Debt != 0 {
		t.Fatalf("25 reported on 10 with a bound of 0: %+v", res[0])
	}
	if out, res := call(t, s, 0, "", check("z", zero)); out.Allowed || res[0].RetryAfter != sec {
		t.Fatalf("check at zero: %+v %+v", out, res[0])
	}
}

// testPostPaidVersions: a policy change while in debt carries the debt,
// clamped to the new bound, and a stale version does not move it back.
func testPostPaidVersions(t *testing.T, s store.Store) {
	v1 := PostPaidVersion(t, 1, 100, "10/s", 1000)
	call(t, s, 0, "", report("a", v1, 600)) // -500
	p2, err := Params(t, 100, "10/s").WithMaxDebt(300)
	if err != nil {
		t.Fatal(err)
	}
	v2 := v1.Next(2, p2, sec, bucket.Clamp) // -490 at 1s, clamped to -300
	v2.Lineage().Publish(v2)
	if _, res := call(t, s, sec, "", check("a", v2)); res[0].Debt != 300 {
		t.Fatalf("debt 490 under a bound of 300: %+v", res[0])
	}
	if _, res := call(t, s, sec, "", check("a", v1)); res[0].Debt != 300 {
		t.Fatalf("a stale version moved the bucket back: %+v", res[0])
	}
}

// testPostPaidReplay: a report is never answered by the check of its
// request id (Envoy sends both with one x-request-id), and a repeat of a
// report's id is replayed, charged once.
func testPostPaidReplay(t *testing.T, s store.Store) {
	v := PostPaidVersion(t, 1, 100, "1/h", 100)
	call(t, s, 0, "req", check("a", v))
	if out, res := call(t, s, 0, "req", report("a", v, 30)); out.Replayed || res[0].Remaining != 70 {
		t.Fatalf("a report with its check's id: %+v %+v", out, res)
	}
	call(t, s, 0, "rep", report("a", v, 30))
	if out, _ := call(t, s, 0, "rep", report("a", v, 30)); !out.Replayed {
		t.Fatal("a repeated report was not replayed")
	}
	if a, _ := balance(t, s, 0, "a", v); a != 40 {
		t.Fatalf("a repeated report was charged again: %d left, want 40", a)
	}
}
