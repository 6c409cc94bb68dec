package store_test

import (
	"errors"
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

func TestValidate(t *testing.T) {
	rate, err := bucket.NewRate(1, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bucket.NewParams(3, rate)
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(1, p, 0)
	items := func(n int) []store.Item {
		its := make([]store.Item, n)
		for i := range its {
			its[i] = store.Item{Key: "a", Version: v, Cost: 1}
		}
		return its
	}
	for _, tc := range []struct {
		name    string
		items   []store.Item
		results int
		valid   bool
	}{
		{"empty", nil, 0, true},
		{"one", items(1), 1, true},
		{"at most MaxItems", items(store.MaxItems), store.MaxItems, true},
		{"more results than items", items(1), 4, true},
		{"more than MaxItems", items(store.MaxItems + 1), store.MaxItems + 1, false},
		{"fewer results than items", items(2), 1, false},
		{"no version", []store.Item{{Key: "a", Version: v}, {Key: "b"}}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Validate(&store.Request{Items: tc.items}, make([]store.Result, tc.results))
			if tc.valid && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if !tc.valid && !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}
