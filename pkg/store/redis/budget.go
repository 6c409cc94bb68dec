package redis

import (
	"fmt"

	"github.com/tokengate/tokengate/pkg/store"
)

// refuseBudgets refuses, wrapping store.ErrInvalid, a request with an
// item of a calendar budget (a version whose buckets expire at its
// period's end, bucket.Version.Horizon): the script sets a key's TTL from
// the time until full, which a budget's never reaches, so it does not
// expire them yet. A bucket that never refills (bucket.NewBudget) without
// a horizon is decided as pkg/bucket decides it (lua/bucket.lua), its key
// living as long as its time until full, bucket.MaxDuration. serve
// --store redis refuses budget policies first.
func refuseBudgets(req *store.Request) error {
	for i := range req.Items {
		if v := req.Items[i].Version; v.Horizon != nil {
			return fmt.Errorf("%w: item %d: the Redis store does not decide calendar budgets (budget, per) yet", store.ErrInvalid, i)
		}
	}
	return nil
}
