package redis

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

func perUser(capacity int) string {
	return fmt.Sprintf("domains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: %d\n      refill: 1/m\n", capacity)
}

// TestCandidateKeySpace: with --store redis the candidate decides on keys
// of its own prefix, on the same Redis: live capacity 10, candidate 5, 8
// requests: the candidate counts 5 ok and 3 over_limit, its keys (its
// bucket, and its store's clock) are all under tokengate:candidate:, and the live bucket was charged 8 (two more
// requests, then over).
func TestCandidateKeySpace(t *testing.T) {
	srv := redistest.Start(t)
	cand := filepath.Join(t.TempDir(), "candidate.yaml")
	tgproc.WritePolicy(t, cand, perUser(5))
	p := start(t, "--store", "redis", "--redis-addr", srv.Addr(), "--redis-timeout", "1s",
		"--policy", writeFile(t, perUser(10)), "--candidate-policy", cand)
	for i := range 8 {
		if r := p.ask(t, descriptor("user_id", "alice")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	// The candidate is decided on a goroutine of its own with Redis: wait
	// for its eighth decision.
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_candidate_decisions_total{domain="edge",result="over_limit",rule="per-user"}`) == "3" &&
			p.Metric(t, `tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`) == "5"
	}, "the candidate's 8 decisions")
	p.WantMetrics(t, map[string]string{
		`tokengate_candidate_decisions_total{domain="edge",result="ok",rule="per-user"}`:                "5",
		`tokengate_candidate_decisions_total{domain="edge",result="over_limit",rule="per-user"}`:        "3",
		`tokengate_candidate_disagreements_total{domain="edge",kind="live_allowed_candidate_rejected"}`: "3",
		`tokengate_decisions_total{domain="edge",result="ok",rule="per-user"}`:                          "8",
	})
	keys, err := redistest.Do(srv.Addr(), "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var live, candidate []string
	for _, k := range strings.Split(keys, "\n") {
		switch {
		case strings.HasPrefix(k, "tokengate:candidate:{"):
			candidate = append(candidate, k)
		case strings.HasPrefix(k, "tokengate:{"):
			live = append(live, k)
		case k != "tokengate:clock" && k != "tokengate:candidate:clock":
			t.Errorf("key %q: neither a bucket nor a store's clock", k)
		}
	}
	if len(live) != 1 || len(candidate) != 1 || slices.Contains(live, candidate[0]) ||
		strings.TrimPrefix(candidate[0], "tokengate:candidate:") != strings.TrimPrefix(live[0], "tokengate:") {
		t.Fatalf("live buckets %q, candidate buckets %q, of keys\n%s", live, candidate, keys)
	}
	for i := range 3 {
		if r := p.ask(t, descriptor("user_id", "alice")); (r.OverallCode == rlsv3.RateLimitResponse_OK) != (i < 2) {
			t.Fatalf("live request %d: %v: the candidate charged the live bucket", 9+i, r)
		}
	}
}
