package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// TestRefusesBudgets: a calendar budget's item is refused with ErrInvalid
// before anything is sent (the store here has no client at all).
func TestRefusesBudgets(t *testing.T) {
	p, err := bucket.NewBudget(10)
	if err != nil {
		t.Fatal(err)
	}
	req := &store.Request{Items: []store.Item{{Key: "k", Version: bucket.NewVersion(1, p, 0)}}}
	_, err = new(Store).Decide(context.Background(), req, make([]store.Result, 1))
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a budget item: %v, want ErrInvalid", err)
	}
}
