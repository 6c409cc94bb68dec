package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// TestRefusesBudgets: a calendar budget's item (a version with a
// horizon) is refused with ErrInvalid before anything is sent (the store
// here has no client at all).
func TestRefusesBudgets(t *testing.T) {
	p, err := bucket.NewBudget(10)
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(1, p, 0)
	v.Horizon = endAt(1)
	req := &store.Request{Items: []store.Item{{Key: "k", Version: v}}}
	_, err = new(Store).Decide(context.Background(), req, make([]store.Result, 1))
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a budget item: %v, want ErrInvalid", err)
	}
}

// endAt is a horizon ending every bucket at the instant e.
type endAt int64

func (e endAt) End(int64) int64 { return int64(e) }
