package rlqs

import (
	"fmt"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	f := newFixture(t, testPolicy, Options{})
	for _, tc := range []struct {
		id      map[string]string
		entries string
		want    string
	}{
		{map[string]string{"path": "/api/x", "user": "a"}, "[{user a} {path /api/x}]", "token_bucket of rule per-user: 10 requests (of 1 tokens) per fill_interval 1s"},
		{map[string]string{"path": "/healthz"}, "[{path /healthz}]", "ALLOW_ALL: rule health does not limit it"},
		{map[string]string{"ip": "10.0.0.1"}, "[{ip 10.0.0.1}]", "DENY_ALL: rule banned has capacity 0"},
		{map[string]string{"b": "2", "a": "1"}, "[{a 1} {b 2}]", "ALLOW_ALL: no rule limits it"},
	} {
		entries, got, err := Explain(f.pol.Load(), "edge", tc.id)
		if err != nil || fmt.Sprint(entries) != tc.entries || !strings.Contains(got, tc.want) {
			t.Errorf("Explain(%v) = %v, %q, %v; want %s, %q", tc.id, entries, got, err, tc.entries, tc.want)
		}
	}
	if _, _, err := Explain(f.pol.Load(), "edge", nil); err == nil {
		t.Error("an empty bucket id explained")
	}
}

func TestReach(t *testing.T) {
	f := newFixture(t, `domains:
  edge:
    - {name: ab, match: [{key: a}, {key: b}], capacity: 1, refill: 1/s}
    - {name: ba, match: [{key: b}, {key: a}], capacity: 1, refill: 1/s}
    - {name: xy, match: [{key: x, value: "1"}, {key: y}], capacity: 1, refill: 1/s}
    - {name: yx, match: [{key: y}, {key: x}], capacity: 1, refill: 1/s}
    - {name: c, match: [{key: c}], capacity: 1, refill: 1/s}
`, Options{})
	got := strings.Join(Reach(f.pol.Load()), "\n")
	for _, want := range []string{
		`rule "ba" (policy.yaml:4): no BucketId reaches it: rule "ab" has its keys in another order and takes any value`,
		`rule "yx" (policy.yaml:6): a BucketId rule "xy" (its keys in another order) accepts meets that rule first`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Reach: %s\nwant %s", got, want)
		}
	}
	if n := len(Reach(f.pol.Load())); n != 2 {
		t.Errorf("%d notes: %s", n, got)
	}
	// testPolicy's per-path-user is met only where per-user refuses.
	if notes := Reach(newFixture(t, testPolicy, Options{}).pol.Load()); len(notes) != 1 || !strings.Contains(notes[0], `rule "per-path-user" (policy.yaml:8): a BucketId rule "per-user"`) {
		t.Errorf("notes for testPolicy: %v", notes)
	}
}
