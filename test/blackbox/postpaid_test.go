package blackbox

import (
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

const llmPolicy = `domains:
  llm:
    - name: tokens
      match: [{key: user_id}]
      capacity: 1000
      refill: 1000/h
      charge: after_response
      max_debt: 100000
`

// llmCall is a descriptor as Envoy Gateway's translator sends it: the
// user's entry with its own hits_addend (0 at request time, the response's
// tokens after it).
func llmCall(user string, hits uint64) *ratelimitv3.RateLimitDescriptor {
	d := tgproc.Descriptor("user_id", user)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// TestPostPaidTokenBudget is issue 22's table on the built binary, on
// each store: a check passes with the whole budget, a report of 5000 on
// 1000 is charged whole and answered OVER_LIMIT (a balance of -4000), and
// the next check is OVER_LIMIT until 4001 tokens are repaid at 1000/h:
// 4h0m3.6s, a retry-after of 14404 s.
func TestPostPaidTokenBudget(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			flags := []string{"--policy", tgproc.PolicyFile(t, llmPolicy)}
			if store == "redis" {
				flags = append(flags, "--store", "redis", "--redis-addr", redistest.Start(t).Addr())
			}
			tokenBudget(t, start(t, flags...))
		})
	}
}

func tokenBudget(t *testing.T, p *tgproc.Proc) {
	if _, body := p.Get(t, "/debug/policy"); !strings.Contains(body, `"charge": "after_response",`) || !strings.Contains(body, `"max_debt": 100000,`) {
		t.Fatalf("/debug/policy: %s", body)
	}
	if r := p.Ask(t, "llm", 0, llmCall("alice", 0)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("check: %v", r)
	}
	r := p.Ask(t, "llm", 0, llmCall("alice", 5000))
	if r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 || r.DynamicMetadata.GetFields()["debt"].GetNumberValue() != 4000 {
		t.Fatalf("report of 5000: %v", r)
	}
	r = p.Ask(t, "llm", 0, llmCall("alice", 0))
	if r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 || tgproc.Header(r, "retry-after") != "14404" {
		t.Fatalf("check in debt: %v", r)
	}
	// Envoy AI Gateway's request-time entry has no hits_addend at all: a
	// check too, whatever the request's.
	if r := p.Ask(t, "llm", 1, tgproc.Descriptor("user_id", "alice")); r.OverallCode != over {
		t.Fatalf("check without a hits_addend: %v", r)
	}
	if r := p.Ask(t, "llm", 0, llmCall("bob", 0)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("another user: %v", r)
	}
	// 200,000 tokens reported on a budget of 1000 and a max_debt of
	// 100,000: 101,000 charged (to -100,000), 99,000 forgiven and counted.
	p.Ask(t, "llm", 0, llmCall("carol", 200_000))
	p.WantMetrics(t, map[string]string{`tokengate_forgiven_tokens_total{domain="llm",rule="tokens"}`: "99000"})
}
