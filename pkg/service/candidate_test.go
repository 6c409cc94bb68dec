package service

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/pkg/candidate"
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

// withCandidate is a fixture whose service decides cand in shadow.
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
// candidate in shadow on a second memory store.
func BenchmarkShouldRateLimitCandidate(b *testing.B) {
	f := newFixture(b, nil)
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	pol.Activate()
	live := f.svc.opts.Policy()
	withCandidate(b, f, live, pol)
	benchUsers(b, f.svc)
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
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(okCount) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("candidate ok %v, want 2", testutil.ToFloat64(okCount))
		}
		runtime.Gosched()
	}
}
