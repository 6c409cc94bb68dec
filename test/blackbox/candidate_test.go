package blackbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/tgproc"
)

func perUser(revision, capacity int) string {
	return fmt.Sprintf("revision: %d\ndomains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: %d\n      refill: 1/m\n", revision, capacity)
}

// candidateView is the part of /debug/candidate the tests read.
type candidateView struct {
	Candidate *struct {
		Revision int64
		SHA256   string
	}
	Requests      uint64
	Disagreements map[string]uint64
	Rules         []struct {
		Domain, Rule    string
		Live, Candidate map[string]uint64
	}
	TopBuckets []struct {
		Rule, Policy, Bucket, Kind string
		Disagreements              uint64
	} `json:"top_buckets"`
}

func debugCandidate(t *testing.T, p *tgproc.Proc) candidateView {
	t.Helper()
	code, body := p.Get(t, "/debug/candidate")
	var v candidateView
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("/debug/candidate: %d %v: %s", code, err, body)
	}
	return v
}

func askAlice(t *testing.T, p *tgproc.Proc, n int) []*rlsv3.RateLimitResponse {
	t.Helper()
	var out []*rlsv3.RateLimitResponse
	for range n {
		out = append(out, p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "alice")))
	}
	return out
}

// TestCandidateCounted: live capacity 10, candidate 5, 8 requests: live 8
// ok, the candidate 5 ok and 3 over_limit, 3 disagreements, on the metrics
// and on /debug/candidate; every answer is the one a tokengate without the
// candidate gives, and the live bucket was charged 8.
func TestCandidateCounted(t *testing.T) {
	live := tgproc.PolicyFile(t, perUser(1, 10))
	cand := filepath.Join(t.TempDir(), "candidate.yaml")
	writeFile(t, cand, perUser(7, 5))
	p := start(t, "--policy", live, "--candidate-policy", cand)
	plain := start(t, "--policy", live)

	got, want := askAlice(t, p, 8), askAlice(t, plain, 8)
	for i := range got {
		if !equalAnswers(got[i], want[i]) {
			t.Fatalf("request %d: %v with the candidate, %v without", i, got[i], want[i])
		}
	}
	p.WantMetrics(t, map[string]string{
		`tokengate_decisions_total{domain="edge",result="ok",rule="per-user"}`:                                          "8",
		`tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`:                                "5",
		`tokengate_candidate_decisions_total{domain="edge",result="over_limit",rule="per-user"}`:                        "3",
		`tokengate_candidate_disagreements_total{domain="edge",kind="live_allowed_candidate_rejected"}`:                 "3",
		`tokengate_candidate_disagreements_total{domain="edge",kind="live_rejected_candidate_allowed"}`:                 "0",
		`tokengate_candidate_policy_reloads_total{result="success"}`:                                                    "1",
		fmt.Sprintf(`tokengate_candidate_policy_info{revision="7",sha256="%s"}`, debugCandidate(t, p).Candidate.SHA256): "1",
	})
	v := debugCandidate(t, p)
	if v.Candidate.Revision != 7 || v.Requests != 8 || v.Disagreements["live_allowed_candidate_rejected"] != 3 {
		t.Fatalf("/debug/candidate: %+v", v)
	}
	if len(v.Rules) != 1 || v.Rules[0].Live["ok"] != 8 || v.Rules[0].Candidate["ok"] != 5 || v.Rules[0].Candidate["over_limit"] != 3 {
		t.Fatalf("/debug/candidate rules: %+v", v.Rules)
	}
	if len(v.TopBuckets) != 1 || v.TopBuckets[0].Disagreements != 3 || v.TopBuckets[0].Policy != "candidate" || v.TopBuckets[0].Bucket == "alice" {
		t.Fatalf("/debug/candidate top buckets: %+v", v.TopBuckets)
	}
	// Two more live tokens, then over: the candidate charged none. The
	// refusal's metadata names alice's bucket as the top list does.
	for i, r := range askAlice(t, p, 3) {
		if (r.OverallCode == rlsv3.RateLimitResponse_OK) != (i < 2) {
			t.Fatalf("live request %d: %v", 9+i, r)
		}
		if key := r.GetDynamicMetadata().GetFields()["key"].GetStringValue(); i == 2 && key != v.TopBuckets[0].Bucket {
			t.Fatalf("the refusal's key %q, the top list's bucket %q", key, v.TopBuckets[0].Bucket)
		}
	}
	if _, body := plain.Get(t, "/metrics"); strings.Contains(body, "tokengate_candidate_") {
		t.Fatal("candidate metrics without a candidate")
	}
}

// equalAnswers compares two answers but for the reset time, which follows
// the clock of each process (within a second of each other).
func equalAnswers(a, b *rlsv3.RateLimitResponse) bool {
	a, b = proto.Clone(a).(*rlsv3.RateLimitResponse), proto.Clone(b).(*rlsv3.RateLimitResponse)
	for i := range a.Statuses {
		if i >= len(b.Statuses) {
			return false
		}
		da, db := a.Statuses[i].DurationUntilReset.AsDuration(), b.Statuses[i].DurationUntilReset.AsDuration()
		if d := da - db; d > time.Second || d < -time.Second {
			return false
		}
		a.Statuses[i].DurationUntilReset, b.Statuses[i].DurationUntilReset = nil, nil
	}
	return proto.Equal(a, b)
}

// TestCandidateReload: the candidate file is hot-reloaded (a new candidate
// starts a fresh record), a bad one keeps the last good candidate and
// never the live policy, a removed one turns the candidate off, and one
// bad at the start is no candidate while the live policy serves.
func TestCandidateReload(t *testing.T) {
	live := tgproc.PolicyFile(t, perUser(1, 100))
	dir := t.TempDir()
	cand := filepath.Join(dir, "candidate.yaml")
	writeFile(t, cand, perUser(1, 100)+"      on_store_error: sometimes\n") // bad from the start
	p := start(t, "--policy", live, "--candidate-policy", cand)
	if v := debugCandidate(t, p); v.Candidate != nil {
		t.Fatalf("a candidate from a bad file: %+v", v)
	}
	askAlice(t, p, 1)
	p.WantMetrics(t, map[string]string{
		`tokengate_decisions_total{domain="edge",result="ok",rule="per-user"}`:           "1",
		`tokengate_candidate_policy_reloads_total{result="failure"}`:                     "1",
		`tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`: "",
	})

	tgproc.WritePolicy(t, cand, perUser(2, 2))
	poll.Eventually(t, tgproc.Timeout, func() bool { v := debugCandidate(t, p); return v.Candidate != nil && v.Candidate.Revision == 2 }, "candidate revision 2")
	askAlice(t, p, 3)
	if v := debugCandidate(t, p); v.Requests != 3 || v.Disagreements["live_allowed_candidate_rejected"] != 1 {
		t.Fatalf("under revision 2: %+v", v)
	}

	tgproc.WritePolicy(t, cand, perUser(3, 1))
	poll.Eventually(t, tgproc.Timeout, func() bool { return debugCandidate(t, p).Candidate.Revision == 3 }, "candidate revision 3")
	// A fresh record; the candidate's bucket carries over, as a live one
	// does on a reload: empty, so both requests are over.
	askAlice(t, p, 2)
	if v := debugCandidate(t, p); v.Requests != 2 || v.Disagreements["live_allowed_candidate_rejected"] != 2 {
		t.Fatalf("under revision 3, a fresh record: %+v", v)
	}

	tgproc.WritePolicy(t, cand, "domains: [")
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_candidate_policy_reloads_total{result="failure"}`) == "2"
	}, "the refusal of a bad candidate")
	if v := debugCandidate(t, p); v.Candidate.Revision != 3 || servingRevision(t, p) != 1 {
		t.Fatalf("after a bad candidate: candidate %+v, live revision %d", v.Candidate, servingRevision(t, p))
	}

	if err := os.Remove(cand); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, tgproc.Timeout, func() bool { return debugCandidate(t, p).Candidate == nil }, "no candidate once its file is removed")
	p.WantMetrics(t, map[string]string{`tokengate_candidate_policy_reloads_total{result="removed"}`: "1"})
	before := p.Metric(t, `tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`)
	for _, r := range askAlice(t, p, 2) {
		if r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("live answer without a candidate: %v", r)
		}
	}
	if after := p.Metric(t, `tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`); after != before {
		t.Fatalf("candidate decisions went on without a candidate: %s -> %s", before, after)
	}
	if servingRevision(t, p) != 1 {
		t.Fatal("the live policy changed")
	}
}
