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
