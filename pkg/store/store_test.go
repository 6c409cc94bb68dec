package store_test

import (
	"errors"
	"fmt"
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
		id      string
	}{
		{"empty", nil, 0, true, ""},
		{"one", items(1), 1, true, ""},
		{"at most MaxItems", items(store.MaxItems), store.MaxItems, true, ""},
		{"more results than items", items(1), 4, true, ""},
		{"more than MaxItems", items(store.MaxItems + 1), store.MaxItems + 1, false, ""},
		{"fewer results than items", items(2), 1, false, ""},
		{"no version", []store.Item{{Key: "a", Version: v}, {Key: "b"}}, 2, false, ""},
		{"a check and a report", []store.Item{{Key: "a", Version: v, Charge: store.Check}, {Key: "a", Version: v, Charge: store.Report, Cost: 9}}, 2, true, ""},
		{"a check with a cost", []store.Item{{Key: "a", Version: v, Charge: store.Check, Cost: 1}}, 1, false, ""},
		{"an unknown charge", []store.Item{{Key: "a", Version: v, Charge: store.Report + 1}}, 1, false, ""},
		{"a reservation", []store.Item{{Key: "a", Version: v, Charge: store.Check, Reserve: 2, ReserveTTL: 1}}, 1, true, "id"},
		{"a reservation without an id", []store.Item{{Key: "a", Version: v, Charge: store.Check, Reserve: 2, ReserveTTL: 1}}, 1, false, ""},
		{"a reservation without a ttl", []store.Item{{Key: "a", Version: v, Charge: store.Check, Reserve: 2}}, 1, false, "id"},
		{"a ttl without a reservation", []store.Item{{Key: "a", Version: v, Charge: store.Check, ReserveTTL: 1}}, 1, false, "id"},
		{"a negative reservation", []store.Item{{Key: "a", Version: v, Charge: store.Check, Reserve: -1, ReserveTTL: 1}}, 1, false, "id"},
		{"a pre-paid reservation", []store.Item{{Key: "a", Version: v, Reserve: 2, ReserveTTL: 1}}, 1, false, "id"},
		{"a report's reservation", []store.Item{{Key: "a", Version: v, Charge: store.Report, Cost: 3, Reserve: 2, ReserveTTL: 1}}, 1, false, "id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Validate(&store.Request{ID: tc.id, Items: tc.items}, make([]store.Result, tc.results))
			if tc.valid && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if !tc.valid && !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// TestFingerprintCharges: a report is not the check, nor the pre-paid
// item, of the same key and cost; a pre-paid request's fingerprint is what
// it was before charges existed.
func TestFingerprintCharges(t *testing.T) {
	fp := func(c store.Charge, cost int64) [16]byte {
		return store.Fingerprint([]store.Item{{Key: "a", Cost: cost, Charge: c}})
	}
	if fp(store.Check, 0) == fp(store.Report, 0) || fp(store.Prepaid, 5) == fp(store.Report, 5) || fp(store.Prepaid, 0) == fp(store.Check, 0) {
		t.Fatal("charges of one key and cost share a fingerprint")
	}
	// sha256("1:a5;")[:16], as every version of tokengate computes it.
	if got := fmt.Sprintf("%x", fp(store.Prepaid, 5)); got != "172494e793b2711cf5c7c85c17245a7a" {
		t.Fatalf("pre-paid fingerprint %s changed", got)
	}
}

// TestFingerprintReserve: a check that reserves is not the same check
// without a reservation, nor one of another reservation.
func TestFingerprintReserve(t *testing.T) {
	fp := func(n int64) [16]byte {
		return store.Fingerprint([]store.Item{{Key: "a", Charge: store.Check, Reserve: n, ReserveTTL: 1}})
	}
	if fp(0) == fp(4) || fp(4) == fp(5) {
		t.Fatal("checks of other reservations share a fingerprint")
	}
}
