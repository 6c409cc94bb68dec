package service

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// logLine is one line of a JSON slog handler.
type logLine struct {
	Msg        string `json:"msg"`
	Level      string `json:"level"`
	Error      string `json:"error"`
	Suppressed int64  `json:"suppressed"`
}

// logLines decodes what a JSON slog handler wrote to b, and empties b.
func logLines(t *testing.T, b *bytes.Buffer) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, ll)
	}
	b.Reset()
	return out
}

// TestStoreFailureLogs: a burst of 1,000 failed decisions is one line,
// the next line (an interval later) counts the 999 held back, and the
// store's first answer after an interval closes the run with the count
// of the failures since; store errors are still counted one by one.
func TestStoreFailureLogs(t *testing.T) {
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	flaky := &switchable{ok: memory.New(memory.Options{Clock: clk})}
	var buf bytes.Buffer
	m := metrics.New(prometheus.NewRegistry())
	svc, err := New(Options{
		Policy: func() *policy.Policy { return pol }, Store: flaky, StoreName: "redis", Metrics: m, Clock: clk,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil)), StoreLogEvery: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: svc, clk: clk, m: m, store: flaky}
	burst := func(n int, step time.Duration, ds ...string) {
		for range n {
			f.call(t, 0, descr(ds...))
			clk.Add(step)
		}
	}
	want := func(step string, lines ...logLine) {
		t.Helper()
		got := logLines(t, &buf)
		if len(got) != len(lines) {
			t.Fatalf("%s: %d lines, want %d: %+v", step, len(got), len(lines), got)
		}
		for i, g := range got {
			if w := lines[i]; g.Msg != w.Msg || g.Suppressed != w.Suppressed || g.Error != w.Error {
				t.Fatalf("%s: line %d: %+v, want %+v", step, i, g, w)
			}
		}
	}
	failed := func(suppressed int64) logLine {
		return logLine{Msg: "store failed; rules' on_store_error decides", Error: "connection refused", Suppressed: suppressed}
	}
	back := func(suppressed int64) logLine { return logLine{Msg: "store answering again", Suppressed: suppressed} }

	flaky.fail = true
	burst(1000, time.Millisecond, "user_id", "u")
	want("a burst of 1,000 in 1s", failed(0))
	burst(1, 0, "user_id", "u")
	want("the 1,001st in the same interval")
	clk.Add(9 * time.Second)
	burst(1, 0, "user_id", "u")
	want("an interval after the first line", failed(1000))

	// Redis returns 5s later: the count waits for the interval.
	burst(500, time.Millisecond, "user_id", "u")
	flaky.fail = false
	burst(10, 0, "user_id", "v")
	burst(1, 0, "path", "/healthz") // unlimited: the store was not asked
	want("the store back within the interval")
	clk.Add(10 * time.Second)
	burst(1, 0, "path", "/healthz")
	want("unlimited: the store was not asked")
	burst(3, 0, "user_id", "w")
	want("the store back after the interval", back(500))
	clk.Add(time.Hour)
	burst(3, 0, "user_id", "x")
	want("nothing held back")

	if got := testutil.ToFloat64(m.StoreErrors.WithLabelValues("redis")); got != 1502 {
		t.Fatalf("store errors counted %v, want 1502", got)
	}
}
