package main

import (
	"slices"
	"testing"
)

func TestBuildRequests(t *testing.T) {
	c := config{Domain: "load", Key: "user_id", Descs: 3, Keys: 4, Hits: 5}
	reqs := buildRequests(c)
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want one per key (4)", len(reqs))
	}
	// Request 3 asks for keys 3, 0, 1.
	var values []string
	for _, d := range reqs[3].GetDescriptors() {
		if e := d.GetEntries(); len(e) != 1 || e[0].GetKey() != "user_id" {
			t.Fatalf("descriptor %v, want one user_id entry", d)
		}
		values = append(values, d.GetEntries()[0].GetValue())
	}
	if want := []string{"u3", "u0", "u1"}; !slices.Equal(values, want) {
		t.Errorf("request 3 values %v, want %v", values, want)
	}
	if r := reqs[3]; r.GetDomain() != "load" || r.GetHitsAddend() != 5 {
		t.Errorf("domain %q, hits_addend %d: want load, 5", r.GetDomain(), r.GetHitsAddend())
	}

	c.Hot = true
	hot := buildRequests(c)
	if len(hot) != 1 || len(hot[0].GetDescriptors()) != 3 || hot[0].GetDescriptors()[2].GetEntries()[0].GetValue() != hotValue {
		t.Errorf("-hot: %v, want one request of 3 %q descriptors", hot, hotValue)
	}
}

func TestPicker(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		p := newPicker(5, 1, 2, true) // worker 1 of 2 starts half way
		var got []int
		for range 7 {
			got = append(got, p.pick())
		}
		if want := []int{2, 3, 4, 0, 1, 2, 3}; !slices.Equal(got, want) {
			t.Errorf("picks %v, want %v", got, want)
		}
	})
	t.Run("random", func(t *testing.T) {
		p := newPicker(10, 0, 1, false)
		seen := map[int]bool{}
		for range 1000 {
			i := p.pick()
			if i < 0 || i >= 10 {
				t.Fatalf("pick %d, want 0..9", i)
			}
			seen[i] = true
		}
		if len(seen) != 10 {
			t.Errorf("1000 picks hit %d of 10 keys", len(seen))
		}
	})
}
