package redis

import (
	"fmt"

	"github.com/tokengate/tokengate/pkg/store"
)

// budgetItem refuses, wrapping store.ErrInvalid, an item of a calendar
// budget (a bucket that never refills, bucket.NewBudget, expiring at its
// period's end, bucket.Version.Horizon): the Lua divides by the refill
// rate and sets a key's TTL from the time until full, so it decides
// neither yet. serve --store redis refuses such policies first.
func budgetItem(it store.Item, i int) error {
	if v := it.Version; !v.Params.Refills() || v.Horizon != nil {
		return fmt.Errorf("%w: item %d: the Redis store does not decide calendar budgets (budget, per) yet", store.ErrInvalid, i)
	}
	return nil
}
