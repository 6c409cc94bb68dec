package policy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// largePolicy writes a policy of 58,560 rules in three domains, the size
// of the file in the "hostile input" report: per-user and per-path
// overrides, allowlisted addresses and per-user path limits, as a tool
// writing one rule per customer would (flow style without spaces, so that
// it fits in MaxFileSize). Each domain ends with four rules, three of them
// unreachable: want lists the warnings, by line.
func largePolicy() (data []byte, rules int, want map[int]string) {
	var b strings.Builder
	line := 2
	emit := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		line++
	}
	want = make(map[int]string)
	b.WriteString("revision: 1\ndomains:\n")
	for _, d := range []struct {
		name  string
		rules int
	}{{"edge", 36_600}, {"api", 14_640}, {"internal", 7_320}} {
		emit(" %s:\n", d.name)
		lines := make(map[string]int) // rule name -> line
		for i := range d.rules - 4 {
			id := strconv.FormatInt(int64(i), 36)
			switch i % 20 {
			case 0, 1, 2, 3, 4, 5, 6, 7:
				lines["u"+id] = line + 1
				emit(" - {name: u%s,match: [{key: user,value: %s}],capacity: 9,refill: 1/s}\n", id, id)
			case 8, 9, 10, 11:
				lines["p"+id] = line + 1
				emit(" - {name: p%s,match: [{key: path,value: /%s/*}],capacity: 9,refill: 1/s}\n", id, id)
			case 12, 13, 14, 15, 16, 17, 18:
				emit(" - {name: a%s,match: [{key: ip,value: 10.%s}],unlimited: true}\n", id, id)
			case 19:
				emit(" - {name: s%s,match: [{key: user},{key: path,value: /%s}],capacity: 9,refill: 1/s}\n", id, id)
			}
		}
		lines["any-user"] = line + 1
		emit(" - {name: any-user,match: [{key: user}],capacity: 9,refill: 1/s}\n")
		want[line+1] = fmt.Sprintf(`domain %q rule "late-user": never matches: rule "any-user" (line %d)`, d.name, lines["any-user"])
		emit(" - {name: late-user,match: [{key: user,value: x-late}],capacity: 9,refill: 1/s}\n")
		want[line+1] = fmt.Sprintf(`domain %q rule "dup-user": never matches: rule "u1" (line %d)`, d.name, lines["u1"])
		emit(" - {name: dup-user,match: [{key: user,value: 1}],capacity: 9,refill: 1/s}\n")
		want[line+1] = fmt.Sprintf(`domain %q rule "sub-path": never matches: rule "p8" (line %d)`, d.name, lines["p8"])
		emit(" - {name: sub-path,match: [{key: path,value: /8/x*}],capacity: 9,refill: 1/s}\n")
		rules += d.rules
	}
	return []byte(b.String()), rules, want
}

// TestValidateLargePolicy: validating a policy of the size in the report
// takes under 5 s of wall time (1.8-2.3 s on the 2-core machines CI runs
// on; it took 29 s of CPU when every rule was compared with every earlier
// one to find unreachable rules), and finds the unreachable rules all the
// same. The best of three runs counts, so that other work on the machine
// does not fail it; under the race detector, which slows this code about 8
// times (16 s alone, more beside another package's tests), the bound is 8
// times larger.
func TestValidateLargePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("validates a 4 MB policy")
	}
	data, rules, want := largePolicy()
	if rules != 58_560 || len(data) > MaxFileSize {
		t.Fatalf("the policy has %d rules in %d bytes; want 58,560 in at most %d", rules, len(data), MaxFileSize)
	}
	limit := 5 * time.Second
	if raceEnabled {
		limit *= 8
	}
	best := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		var out strings.Builder
		err := Validate(&out, "large.yaml", data)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if best == 1<<63-1 {
			checkLargeWarnings(t, out.String(), want)
		}
		best = min(best, took)
		if best < limit {
			break
		}
	}
	t.Logf("%d rules, %d bytes: validated in %v (race detector: %v)", rules, len(data), best, raceEnabled)
	if best >= limit {
		t.Fatalf("validation took %v, want under %v", best, limit)
	}
}

func checkLargeWarnings(t *testing.T, out string, want map[int]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")[1:] // after the summary
	if len(lines) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "warning: large.yaml:%d:", &n); err != nil || !strings.Contains(l, want[n]) || want[n] == "" {
			t.Errorf("warning %q, want line %d to say %q", l, n, want[n])
		}
	}
}
