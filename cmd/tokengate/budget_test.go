package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimulateStart: --start places the trace's t=0 on the wall clock, so
// a daily budget comes back whole at the trace's first midnight.
func TestSimulateStart(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(pol, []byte("domains:\n  edge:\n    - name: daily\n      match: [{key: user}]\n      limits:\n        - {budget: 2, per: day, time_zone: Europe/Madrid}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Three requests a second apart, then one an hour later.
	if err := os.WriteFile(trace, []byte("t,domain,entries,hits\n0,edge,user=a,\n1,edge,user=a,\n2,edge,user=a,\n3600,edge,user=a,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(start string) string {
		t.Helper()
		args := []string{"--policy", pol, "--trace", trace, "--format", "json"}
		if start != "" {
			args = append(args, "--start", start)
		}
		var out bytes.Buffer
		if err := simulateCmd(args, strings.NewReader(""), &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	// Half an hour before midnight in Madrid: the last request is in the
	// next day, whole again, so 3 of 4 pass; at noon only 2 do.
	late := run(time.Date(2026, 3, 28, 23, 30, 0, 0, time.FixedZone("CET", 3600)).Format(time.RFC3339))
	noon := run("2026-03-28T12:00:00+01:00")
	if !strings.Contains(late, `"over_limit": 1,`) || !strings.Contains(noon, `"over_limit": 2,`) || !strings.Contains(late, `"allowed": 3,`) {
		t.Fatalf("late start:\n%s\nnoon start:\n%s", late, noon)
	}
	var out bytes.Buffer
	if err := simulateCmd([]string{"--policy", pol, "--trace", trace, "--start", "yesterday"}, strings.NewReader(""), &out); err == nil || !strings.Contains(err.Error(), "--start") {
		t.Errorf("a bad --start: %v", err)
	}
}
