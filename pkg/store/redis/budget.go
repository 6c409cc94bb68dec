package redis

import (
	"fmt"

	"github.com/tokengate/tokengate/pkg/store"
)

// refuseBudgets refuses, wrapping store.ErrInvalid, a request with an
// item of a calendar budget (a bucket that never refills,
// bucket.NewBudget, expiring at its period's end, bucket.Version.Horizon):
// the Lua divides by the refill rate and sets a key's TTL from the time
// until full, so it decides neither yet. serve --store redis refuses such
// policies first.
func refuseBudgets(req *store.Request) error {
	for i := range req.Items {
		if v := req.Items[i].Version; !v.Params.Refills() || v.Horizon != nil {
			return fmt.Errorf("%w: item %d: the Redis store does not decide calendar budgets (budget, per) yet", store.ErrInvalid, i)
		}
	}
	return nil
}
