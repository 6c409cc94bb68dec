package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/pkg/candidate"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

func perUserPolicy(t testing.TB, capacity string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("domains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: "+capacity+"\n      refill: 1/m\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.Activate()
	return p
}

// withCandidate is a fixture whose service decides cand as its candidate.
func withCandidate(t testing.TB, f *fixture, live, cand *policy.Policy) *metrics.Candidate {
	t.Helper()
	cm := metrics.NewCandidate(prometheus.NewRegistry())
	svc, err := New(Options{
		Policy: func() *policy.Policy { return live }, Store: f.store, StoreName: "memory", Metrics: f.m, Clock: f.clk,
		Candidate: &Candidate{
			Policy:  func() *policy.Policy { return cand },
			Store:   memory.New(memory.Options{Clock: f.clk}),
			Tracker: candidate.New(candidate.Options{Metrics: cm, Clock: f.clk}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	return cm
}

// TestCandidateCounts: live capacity 10, candidate 5, 8 requests: live 8
// ok; the candidate 5 ok and 3 over_limit; 3 disagreements; every answer
// the live one (equal to a service without the candidate).
func TestCandidateCounts(t *testing.T) {
	plain := newFixture(t, nil)
	plain.svc, _ = New(Options{Policy: func() *policy.Policy { return perUserPolicy(t, "10") }, Store: plain.store, Metrics: plain.m, Clock: plain.clk})
	f := newFixture(t, nil)
	live := perUserPolicy(t, "10")
	cm := withCandidate(t, f, live, perUserPolicy(t, "5"))
	for i := range 8 {
		want := plain.call(t, 0, descr("user_id", "alice"))
		got := f.call(t, 0, descr("user_id", "alice"))
		if !proto.Equal(got, want) || got.OverallCode != ok {
			t.Fatalf("request %d: %v with the candidate, %v without", i, got, want)
		}
		f.clk.Add(time.Millisecond)
		plain.clk.Add(time.Millisecond)
	}
	for _, c := range []struct {
		result string
		want   float64
	}{{metrics.ResultOK, 5}, {metrics.ResultOverLimit, 3}} {
		if got := testutil.ToFloat64(cm.Decisions.WithLabelValues("edge", "per-user", c.result)); got != c.want {
			t.Errorf("candidate %s: %v, want %v", c.result, got, c.want)
		}
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "per-user", metrics.ResultOK)); got != 8 {
		t.Errorf("live ok: %v, want 8", got)
	}
	if got := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", metrics.LiveAllowedCandidateRejected)); got != 3 {
		t.Errorf("disagreements: %v, want 3", got)
	}
	if got := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", metrics.LiveRejectedCandidateAllowed)); got != 0 {
		t.Errorf("reverse disagreements: %v, want 0", got)
	}
	// The live bucket was charged 8, not 13: two more, then over.
	for i := range 3 {
		if r := f.call(t, 0, descr("user_id", "alice")); (r.OverallCode == ok) != (i < 2) {
			t.Fatalf("live request %d after the 8: %v", 9+i, r)
		}
	}
}

// TestCandidateNone: with no candidate now, nothing is decided again.
func TestCandidateNone(t *testing.T) {
	f := newFixture(t, nil)
	cm := withCandidate(t, f, perUserPolicy(t, "10"), nil)
	f.call(t, 0, descr("user_id", "alice"))
	if n := testutil.CollectAndCount(cm.Decisions); n != 0 {
		t.Fatalf("%d candidate series without a candidate", n)
	}
}

// BenchmarkShouldRateLimitCandidate is BenchmarkShouldRateLimit with a
// candidate on a second memory store.
func BenchmarkShouldRateLimitCandidate(b *testing.B) {
	f := newFixture(b, nil)
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	pol.Activate()
	live := f.svc.opts.Policy()
	withCandidate(b, f, live, pol)
	benchUsers(b, f.svc, nil)
}

// blockingStore holds every Decide until release is closed.
type blockingStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) Decide(ctx context.Context, req *store.Request, res []store.Result) (store.Outcome, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Store.Decide(ctx, req, res)
}

// TestCandidateAsync: with Async the answer does not wait for the
// candidate's store, the candidate is decided after it, and a request
// beyond MaxInFlight is skipped and counted.
func TestCandidateAsync(t *testing.T) {
	f := newFixture(t, nil)
	live, cand := perUserPolicy(t, "10"), perUserPolicy(t, "5")
	cm := metrics.NewCandidate(prometheus.NewRegistry())
	bs := &blockingStore{Store: memory.New(memory.Options{Clock: f.clk}), entered: make(chan struct{}, 8), release: make(chan struct{})}
	svc, err := New(Options{
		Policy: func() *policy.Policy { return live }, Store: f.store, Metrics: f.m, Clock: f.clk,
		Candidate: &Candidate{Policy: func() *policy.Policy { return cand }, Store: bs, Async: true, MaxInFlight: 2,
			Tracker: candidate.New(candidate.Options{Metrics: cm, Clock: f.clk})},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	for i := range 3 { // answered while the candidate's store holds
		if r := f.call(t, 0, descr("user_id", "alice")); r.OverallCode != ok {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	<-bs.entered
	<-bs.entered
	if got := testutil.ToFloat64(cm.Skipped); got != 1 {
		t.Fatalf("skipped %v, want 1 (MaxInFlight 2)", got)
	}
	close(bs.release)
	okCount := cm.Decisions.WithLabelValues("edge", "per-user", metrics.ResultOK)
	poll.Eventually(t, 10*time.Second, func() error {
		if got := testutil.ToFloat64(okCount); got != 2 {
			return fmt.Errorf("candidate ok %v, want 2", got)
		}
		return nil
	}, "the held candidate decisions")
}

// TestCandidateSameAsLive: a candidate that is the live policy, on a store
// of its own that starts as empty as the live one, decides every request
// as the live policy does: every result of every rule counted as
// tokengate_decisions_total counts it (ok, over_limit, refused,
// shadow_over_limit, no_rule, an unlimited rule, a cost, a request id's
// replay), and no disagreement.
func TestCandidateSameAsLive(t *testing.T) {
	f := newFixture(t, nil)
	live := f.svc.opts.Policy()
	cand, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cand.Activate()
	cm := withCandidate(t, f, live, cand)
	id := descr("request_id", "r-1")
	for i := range 12 {
		f.call(t, 0, descr("user_id", "alice"))
		f.call(t, 0, descr("user_id", "bob", "path", "/upload/a"), descr("user_id", "bob"))
		f.call(t, 0, descr("remote_address", "10.0.0.1"), descr("user_id", "carol"))
		f.call(t, 0, descr("path", "/healthz"), descr("nobody", "x"))
		f.call(t, uint32(i), descr("tenant", "t"), id)
		f.call(t, 0, descr("user_id", strings.Repeat("v", MaxValueBytes+1)))
		f.clk.Add(300 * time.Millisecond)
	}
	live2, cand2 := gather(t, f.m.Decisions), gather(t, cm.Decisions)
	for _, m := range []map[string]float64{live2, cand2} {
		for k := range m {
			if cand2[k] != live2[k] {
				t.Errorf("%s: live %v, candidate %v", k, live2[k], cand2[k])
			}
		}
	}
	for _, k := range []string{"edge/per-user/over_limit", "edge/per-user/refused", "edge/shadow-ip/shadow_over_limit", "edge//no_rule", "edge/health/ok"} {
		if live2[k] == 0 {
			t.Errorf("%s never happened: the test proves less than it says", k)
		}
	}
	if n := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", metrics.LiveAllowedCandidateRejected)) +
		testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", metrics.LiveRejectedCandidateAllowed)); n != 0 {
		t.Fatalf("%v disagreements between a policy and itself", n)
	}
}

// TestCandidateStoreFails: a failing candidate store counts store_error
// and compares nothing; the live answer is the store's.
func TestCandidateStoreFails(t *testing.T) {
	f := newFixture(t, nil)
	live := f.svc.opts.Policy()
	cm := metrics.NewCandidate(prometheus.NewRegistry())
	svc, err := New(Options{Policy: func() *policy.Policy { return live }, Store: f.store, Metrics: f.m, Clock: f.clk,
		Candidate: &Candidate{Policy: func() *policy.Policy { return live }, Store: failing{},
			Tracker: candidate.New(candidate.Options{Metrics: cm, Clock: f.clk})}})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	for range 7 {
		f.call(t, 0, descr("user_id", "alice"))
	}
	if got := testutil.ToFloat64(cm.Decisions.WithLabelValues("edge", "per-user", metrics.ResultStoreError)); got != 7 {
		t.Fatalf("candidate store_error %v, want 7", got)
	}
	if got := testutil.ToFloat64(f.m.Decisions.WithLabelValues("edge", "per-user", metrics.ResultOverLimit)); got != 2 {
		t.Fatalf("live over_limit %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.m.StoreErrors.WithLabelValues("memory")); got != 0 {
		t.Fatalf("the candidate's failures counted as the live store's: %v", got)
	}
	for _, k := range []string{metrics.LiveAllowedCandidateRejected, metrics.LiveRejectedCandidateAllowed} {
		if v := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", k)); v != 0 {
			t.Fatalf("%s %v: a failed store's answer compared", k, v)
		}
	}
}

// gather is every sample of a domain, rule, result counter vector, by
// "domain/rule/result".
func gather(t *testing.T, v *prometheus.CounterVec) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	v.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		l := map[string]string{}
		for _, p := range pb.Label {
			l[p.GetName()] = p.GetValue()
		}
		out[l["domain"]+"/"+l["rule"]+"/"+l["result"]] = pb.Counter.GetValue()
	}
	return out
}

// candidateFixture is a fixture deciding live, with cand as its candidate
// on a memory store of its own, and the candidate's tracker and metrics.
func candidateFixture(t *testing.T, live, cand *policy.Policy) (*fixture, *candidate.Tracker, *metrics.Candidate) {
	t.Helper()
	f := newFixtureWith(t, "domains: {}\n", func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) }, nil)
	cm := metrics.NewCandidate(prometheus.NewRegistry())
	tr := candidate.New(candidate.Options{Metrics: cm, Clock: f.clk})
	svc, err := New(Options{Policy: func() *policy.Policy { return live }, Store: f.store, Metrics: f.m, Clock: f.clk,
		Candidate: &Candidate{Policy: func() *policy.Policy { return cand }, Store: memory.New(memory.Options{Clock: f.clk}), Tracker: tr}})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	return f, tr, cm
}

// chargedBudget is a budget on user_id of capacity tokens an hour, charged
// as charge says ("" for before the request), with more of its fields
// (YAML lines) if any.
func chargedBudget(t *testing.T, capacity, charge string, more ...string) *policy.Policy {
	t.Helper()
	src := "request_id_key: request_id\ndomains:\n  edge:\n    - name: tokens\n      match: [{key: user_id}]\n      capacity: " + capacity + "\n      refill: " + capacity + "/h\n"
	if charge != "" {
		src += "      charge: " + charge + "\n"
	}
	for _, m := range more {
		src += "      " + m + "\n"
	}
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p.Activate()
	return p
}

// TestCandidatePostPaid: a post-paid candidate beside a pre-paid live
// policy, and the reverse, each on its own buckets. A report is compared
// as a report: its answer reaches no client (Envoy ignores the call made
// when the stream is done), so a request that either policy reads as a
// report is counted per rule and in the view's reports, never as a
// disagreement, whatever the two answered. The check after it is
// compared: the post-paid budget is in debt and refuses it, the
// pre-paid one lets it through.
func TestCandidatePostPaid(t *testing.T) {
	for _, c := range []struct {
		name             string
		live, cand       *policy.Policy
		kind             string // the check's disagreement
		reportsLive      uint64 // of the rule's decisions, reports
		reportsCandidate uint64
	}{
		{"live pre-paid, candidate post-paid", chargedBudget(t, "2000", ""), chargedBudget(t, "1000", "after_response"),
			metrics.LiveAllowedCandidateRejected, 0, 1},
		{"live post-paid, candidate pre-paid", chargedBudget(t, "1000", "after_response"), chargedBudget(t, "2000", ""),
			metrics.LiveRejectedCandidateAllowed, 1, 0},
		{"live post-paid, candidate every_hit", chargedBudget(t, "1000", "after_response"), chargedBudget(t, "2000", "every_hit"),
			metrics.LiveRejectedCandidateAllowed, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, tr, cm := candidateFixture(t, c.live, c.cand)
			f.call(t, 0, hits(descr("user_id", "u"), 0))                              // a check: both OK
			f.call(t, 0, hits(descr("user_id", "u"), 1500), descr("request_id", "r")) // its report: 1500 of 2000 pre-paid, -500 post-paid
			f.call(t, 0, hits(descr("user_id", "u"), 0))                              // a check: the post-paid budget is in debt
			v := tr.View(c.cand, f.clk.Now())
			if v.Requests != 2 || v.Reports != 1 {
				t.Errorf("compared %d, reports %d; want 2, 1", v.Requests, v.Reports)
			}
			for _, k := range []string{metrics.LiveAllowedCandidateRejected, metrics.LiveRejectedCandidateAllowed} {
				want := 0.0
				if k == c.kind {
					want = 1
				}
				if got := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", k)); got != want {
					t.Errorf("%s: %v, want %v", k, got, want)
				}
				if v.Disagreements[k] != uint64(want) {
					t.Errorf("view %s: %d, want %v", k, v.Disagreements[k], want)
				}
			}
			var rv *candidate.RuleView
			for i := range v.Rules {
				if v.Rules[i].Rule == "tokens" {
					rv = &v.Rules[i]
				}
			}
			if rv == nil || rv.Reports["live"] != c.reportsLive || rv.Reports["candidate"] != c.reportsCandidate {
				t.Errorf("rule tokens: %+v", rv)
			}
		})
	}
}

// TestCandidateReservations: a candidate with reservations holds them on
// its own store, and its reports settle them there: reserve 400 of 1000
// beside a pre-paid live budget. a's and b's checks hold 800, so c's is
// refused by the candidate alone (a disagreement); a's report of 100
// settles a's 400 (300 back: 500), so d's check holds 400 again; the live
// budget was never charged by the candidate.
func TestCandidateReservations(t *testing.T) {
	f, tr, cm := candidateFixture(t, chargedBudget(t, "1000", ""), chargedBudget(t, "1000", "after_response", "reserve: 400"))
	check := func(id string) *rlsv3.RateLimitResponse {
		return f.call(t, 0, descr("request_id", id), hits(descr("user_id", "u"), 0))
	}
	for _, id := range []string{"a", "b", "c"} {
		if r := check(id); r.OverallCode != ok || r.Statuses[1].LimitRemaining != 1000 {
			t.Fatalf("live check %s: %v", id, r)
		}
	}
	f.call(t, 0, descr("request_id", "a"), hits(descr("user_id", "u"), 100))
	check("d")
	if got := testutil.ToFloat64(cm.Disagreements.WithLabelValues("edge", metrics.LiveAllowedCandidateRejected)); got != 1 {
		t.Errorf("disagreements %v, want 1 (c's check)", got)
	}
	if got := testutil.ToFloat64(cm.Decisions.WithLabelValues("edge", "tokens", metrics.ResultOK)); got != 4 {
		t.Errorf("candidate ok %v, want 4 (a, b, d's checks, a's report)", got)
	}
	if v := tr.View(f.svc.opts.Candidate.Policy(), f.clk.Now()); v.Requests != 4 || v.Reports != 1 {
		t.Errorf("compared %d, reports %d; want 4, 1", v.Requests, v.Reports)
	}
}
