package storetest

import (
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// horizonAfter is a horizon ending every bucket d ns after its instant.
type horizonAfter int64

func (d horizonAfter) End(at int64) int64 { return at + int64(d) }

// testBudget: a calendar budget's bucket (bucket.NewBudget, its version
// with a horizon) beside a refilling one in one request: charged together
// or not at all (a rejection by the refilling one leaves the budget's
// tokens, on a Cluster the rollback of a reserve), never refilled, its
// waits bucket.MaxDuration, a refund capped at the budget.
func testBudget(t *testing.T, s store.Store) {
	p, err := bucket.NewBudget(10)
	if err != nil {
		t.Fatal(err)
	}
	b := bucket.NewVersion(1, p, 0)
	b.Horizon = horizonAfter(1000 * sec)
	b.Lineage().Publish(b)
	v := Version(t, 2, 5, "1/s")
	out, res := call(t, s, 0, "", store.Item{Key: "a", Version: b, Cost: 4}, store.Item{Key: "b", Version: v, Cost: 5})
	if !out.Allowed || res[0].Remaining != 6 || res[0].ResetAfter != bucket.MaxDuration || res[1].Remaining != 0 {
		t.Fatalf("budget and band: %+v %+v", out, res)
	}
	out, res = call(t, s, sec, "", store.Item{Key: "a", Version: b, Cost: 4}, store.Item{Key: "b", Version: v, Cost: 5})
	if out.Allowed || !res[0].Allowed || res[1].Allowed || res[0].Remaining != 6 {
		t.Fatalf("the band refuses: %+v %+v", out, res)
	}
	out, res = call(t, s, 100*sec, "", store.Item{Key: "a", Version: b, Cost: 7})
	if out.Allowed || res[0].Remaining != 6 || res[0].RetryAfter != bucket.MaxDuration || res[0].Never {
		t.Fatalf("a budget refills nothing: %+v %+v", out, res[0])
	}
	call(t, s, 100*sec, "", store.Item{Key: "a", Version: b, Cost: -20})
	if got := remaining(t, s, 100*sec, "a", b); got != 10 {
		t.Fatalf("a refund of 20: %d tokens, want the budget, 10", got)
	}
}
