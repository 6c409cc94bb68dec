package candidate

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

func parse(t *testing.T, capacity int) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("domains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: "+strconv.Itoa(capacity)+"\n      refill: 1/m\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type fixture struct {
	tr         *Tracker
	m          *metrics.Candidate
	clk        *clock.Fake
	logs       *bytes.Buffer
	key        *keyhash.Key
	live, cand *policy.Policy
}

func newFixture(t *testing.T, top int) *fixture {
	f := &fixture{m: metrics.NewCandidate(prometheus.NewRegistry()), clk: new(clock.Fake), logs: new(bytes.Buffer),
		key: keyhash.Random(), live: parse(t, 10), cand: parse(t, 5)}
	f.tr = New(Options{Metrics: f.m, Clock: f.clk, Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), TopBuckets: top, KeyHash: f.key})
	return f
}

// observe records one request of user whose live and candidate results
// are given.
func (f *fixture) observe(user string, live, cand Result) {
	lr, cr := f.live.Rule("edge", "per-user"), f.cand.Rule("edge", "per-user")
	f.tr.Observe(f.clk.Now(), f.live, f.cand, &Request{Domain: "edge",
		Live: []Decision{{Rule: lr, Result: live, Key: "k" + user}}, Candidate: []Decision{{Rule: cr, Result: cand, Key: "k" + user}}})
}

func TestTrackerCountsAndView(t *testing.T) {
	f := newFixture(t, 0)
	for range 5 {
		f.observe("a", OK, OK)
	}
	for range 3 {
		f.observe("a", OK, OverLimit)
	}
	f.observe("b", OverLimit, OK)
	f.observe("c", StoreError, OverLimit) // not compared
	if got := testutil.ToFloat64(f.m.Disagreements.WithLabelValues("edge", metrics.LiveAllowedCandidateRejected)); got != 3 {
		t.Fatalf("disagreements %v, want 3", got)
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "per-user", "over_limit")); got != 4 {
		t.Fatalf("candidate over_limit %v, want 4", got)
	}
	rec := httptest.NewRecorder()
	f.tr.Handler(func() *policy.Policy { return f.cand }).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/candidate", nil))
	var v View
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Requests != 9 || v.Disagreements[metrics.LiveAllowedCandidateRejected] != 3 || v.Disagreements[metrics.LiveRejectedCandidateAllowed] != 1 {
		t.Fatalf("view %+v", v)
	}
	var rule *RuleView
	for i := range v.Rules {
		if v.Rules[i].Rule == "per-user" {
			rule = &v.Rules[i]
		}
	}
	if rule == nil || rule.Live["ok"] != 8 || rule.Live["over_limit"] != 1 || rule.Candidate["ok"] != 6 || rule.Candidate["over_limit"] != 4 {
		t.Fatalf("rule %+v", rule)
	}
	if len(v.TopBuckets) != 2 || v.TopBuckets[0].Disagreements != 3 || v.TopBuckets[0].Policy != "candidate" ||
		v.TopBuckets[1].Policy != "live" || strings.Contains(rec.Body.String(), `"ka"`) {
		t.Fatalf("top buckets %+v in %s", v.TopBuckets, rec.Body)
	}
	// Each bucket is named as the live service's log names it: the keyed
	// hash of its key under the tracker's KeyHash.
	if got, want := v.TopBuckets[0].Bucket, f.key.Hash([]byte("ka")); got != want {
		t.Fatalf("bucket %q, want %q, the keyed hash of its key", got, want)
	}
	// A new candidate starts a fresh record.
	f.cand = parse(t, 6)
	if v := f.tr.View(f.cand, 0); v.Requests != 0 || len(v.Rules) != 0 || v.Candidate.SHA256 != f.cand.SHA256() {
		t.Fatalf("fresh view %+v", v)
	}
}

// TestTopBounded: the list holds at most TopBuckets entries whatever the
// number of buckets, and a heavy bucket among many light ones stays first.
func TestTopBounded(t *testing.T) {
	f := newFixture(t, 8)
	for i := range 1000 {
		f.observe(strconv.Itoa(i), OK, OverLimit)
		if i%4 == 0 {
			f.observe("heavy", OK, OverLimit)
		}
	}
	v := f.tr.View(f.cand, 0)
	if len(v.TopBuckets) != 8 || v.TopBuckets[0].Disagreements < 250 {
		t.Fatalf("top %+v", v.TopBuckets)
	}
	if v.TopBuckets[0].Disagreements-v.TopBuckets[0].Overcount > 250 {
		t.Fatalf("heavy bucket's lower bound %d is above its 250", v.TopBuckets[0].Disagreements-v.TopBuckets[0].Overcount)
	}
}

// TestSummaryOncePerMinute: on a fake clock, one line a minute with the
// counts since the one before; a quiet minute logs nothing.
func TestSummaryOncePerMinute(t *testing.T) {
	f := newFixture(t, 0)
	f.observe("a", OK, OverLimit) // the candidate is first seen at 0
	f.clk.Add(59 * time.Second)
	f.observe("a", OK, OK)
	if f.logs.Len() != 0 {
		t.Fatalf("a line before a minute: %s", f.logs)
	}
	f.clk.Add(time.Second)
	f.observe("a", OK, OverLimit)
	f.observe("a", OK, OverLimit)
	lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %q", lines)
	}
	var line struct {
		Msg       string
		Requests  int `json:"requests"`
		Disagreed int `json:"live_allowed_candidate_rejected"`
		Top       struct {
			Rule, Bucket  string
			Disagreements int
		} `json:"top_bucket"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	if line.Requests != 3 || line.Disagreed != 2 || line.Top.Rule != "per-user" || line.Top.Disagreements != 2 ||
		line.Top.Bucket != f.key.Hash([]byte("ka")) {
		t.Fatalf("summary %s", lines[0])
	}
	f.logs.Reset()
	f.clk.Add(time.Minute)
	f.observe("a", OK, OK) // the one after the minute: the line counts it alone
	f.clk.Add(2 * time.Minute)
	f.observe("a", OK, OK)
	if n := strings.Count(f.logs.String(), "\n"); n != 2 || !strings.Contains(f.logs.String(), "agrees") {
		t.Fatalf("lines %s", f.logs)
	}
}

// TestRefusedHasNoBucket: a descriptor refused before the store (no key)
// counts its disagreement for its rule, not for a bucket.
func TestRefusedHasNoBucket(t *testing.T) {
	f := newFixture(t, 0)
	lr, cr := f.live.Rule("edge", "per-user"), f.cand.Rule("edge", "per-user")
	f.tr.Observe(0, f.live, f.cand, &Request{Domain: "edge",
		Live: []Decision{{Rule: lr, Result: OK, Key: "k"}}, Candidate: []Decision{{Rule: cr, Result: Refused}}})
	v := f.tr.View(f.cand, 0)
	if len(v.TopBuckets) != 0 || v.Disagreements[metrics.LiveAllowedCandidateRejected] != 1 ||
		v.Rules[0].Disagreements[metrics.LiveAllowedCandidateRejected] != 1 {
		t.Fatalf("view %+v", v)
	}
}

// TestTrackerReports: a request either policy reads as a report is
// counted per rule, with how many of its decisions were reports, and in
// the view's reports, never compared: not in requests, no disagreement,
// whatever the two answered (Envoy ignores a report's answer).
func TestTrackerReports(t *testing.T) {
	f := newFixture(t, 0)
	lr, cr := f.live.Rule("edge", "per-user"), f.cand.Rule("edge", "per-user")
	for _, c := range []struct {
		live, cand             Result
		liveReport, candReport bool
	}{
		{OK, OverLimit, false, true}, // pre-paid live covers it, the post-paid candidate goes into debt
		{Refused, OK, false, true},   // above the live capacity; the candidate charges it
		{OverLimit, OK, true, false}, // the reverse
		{OverLimit, OverLimit, true, true},
	} {
		f.tr.Observe(f.clk.Now(), f.live, f.cand, &Request{Domain: "edge",
			Live:      []Decision{{Rule: lr, Result: c.live, Key: "ka", Report: c.liveReport}},
			Candidate: []Decision{{Rule: cr, Result: c.cand, Key: "ka", Report: c.candReport}}})
	}
	f.observe("a", OK, OverLimit) // a check: compared
	v := f.tr.View(f.cand, f.clk.Now())
	if v.Requests != 1 || v.Reports != 4 || v.Disagreements[metrics.LiveAllowedCandidateRejected] != 1 || v.Disagreements[metrics.LiveRejectedCandidateAllowed] != 0 {
		t.Fatalf("view: requests %d, reports %d, disagreements %v", v.Requests, v.Reports, v.Disagreements)
	}
	if len(v.Rules) != 1 || v.Rules[0].Reports["live"] != 2 || v.Rules[0].Reports["candidate"] != 3 ||
		v.Rules[0].Live["over_limit"] != 2 || v.Rules[0].Candidate["over_limit"] != 3 {
		t.Fatalf("rules %+v", v.Rules)
	}
	if len(v.TopBuckets) != 1 || v.TopBuckets[0].Disagreements != 1 {
		t.Fatalf("top buckets %+v: a report counted", v.TopBuckets)
	}
}
