package rlqs

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
)

// boundRun is one simulation: Envoys with their own phases, reporting
// intervals, demands and response delays, against one rule.
type boundRun struct {
	capacity, perSecond int64
	envoys              []boundEnvoy
	noAssignAllow       bool
	replicas            int // tokengate replicas on one store, the Envoys spread over them
	concurrency         int // Options.Concurrency
	// stores, when set, makes the replicas' stores (one each, on one
	// backend); otherwise they share the fixture's memory store.
	stores func(t tester, clk *clock.Fake, n int) []store.Store
}

type boundEnvoy struct {
	interval time.Duration // its reporting_interval, at most the server's
	phase    time.Duration // when its clock starts, against the server's
	delay    time.Duration // a response's time to arrive, at most the slack
	perStep  int           // requests every step (10 ms)
	users    int           // buckets it sends requests for, 1 or 2
}

const boundStep = 10 * time.Millisecond

// simulate runs 30 s of simulated time and checks, at every step, the
// bound of doc.go: the requests the Envoys allowed for a bucket are at
// most capacity + rate*t plus those no_assignment_behavior allowed before
// an assignment; and the invariant it rests on, that what they allowed
// under assignments was paid for by leases before. It returns the requests allowed and the bound at the end.
func (r boundRun) simulate(t tester) (allowed, bound int64) {
	policy := fmt.Sprintf("domains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: %d\n      refill: %d/s\n", r.capacity, r.perSecond)
	f := newFixture(t, policy, Options{ReportingInterval: time.Second, Concurrency: r.concurrency})
	var replicas []*Service
	if r.stores == nil {
		replicas = append(replicas, f.svc)
		for range r.replicas - 1 {
			replicas = append(replicas, f.replica(prometheus.NewRegistry(), f.store))
		}
	} else {
		for _, st := range r.stores(t, f.clk, r.replicas) {
			replicas = append(replicas, f.replica(prometheus.NewRegistry(), st))
		}
	}
	leased := func() (n int64) {
		for _, svc := range replicas {
			n += int64(testutil.ToFloat64(svc.m.leased.WithLabelValues("edge", "per-user")))
		}
		return n
	}
	start := f.clk.Now()
	es := make([]*envoy, len(r.envoys))
	for i, be := range r.envoys {
		e := f.openOn(replicas[i%len(replicas)]).envoy("edge", be.interval, start+int64(be.phase))
		e.delay, e.noAssign = int64(be.delay), r.noAssignAllow
		es[i] = e
	}
	users := []map[string]string{{"user": "u0"}, {"user": "u1"}}
	perUser := make([]int64, len(users))
	unassigned := make([]int64, len(users))
	for step := int64(1); step <= int64(30*time.Second/boundStep); step++ {
		now := f.clk.Add(boundStep)
		for i, e := range es {
			be := r.envoys[i]
			if now < start+int64(be.phase) {
				continue
			}
			e.tick(now)
			for n := range be.perStep {
				u := n % be.users
				before := e.unassigned
				if e.request(now, users[u]) {
					perUser[u]++
				}
				unassigned[u] += int64(e.unassigned - before)
			}
		}
		if step%10 == 0 {
			for _, svc := range replicas {
				svc.Tick(now)
			}
		}
		// What the Envoys spent was paid before they could spend it: all
		// they allowed is what the leases took, but for what
		// no_assignment_behavior allowed.
		var all, free int64
		for u := range users {
			all, free = all+perUser[u], free+unassigned[u]
		}
		if paid := leased(); all > paid+free {
			t.Fatalf("at %v the Envoys allowed %d, more than the %d their leases paid and the %d no assignment allowed", time.Duration(now-start), all, paid, free)
		}
		refill := new(big.Int).Div(big.NewInt(0).Mul(big.NewInt(r.perSecond), big.NewInt(now-start)), big.NewInt(int64(time.Second))).Int64()
		for u := range users {
			if limit := r.capacity + refill + unassigned[u]; perUser[u] > limit {
				t.Fatalf("at %v bucket %d allowed %d, more than %d = capacity %d + rate %d/s * t + %d unassigned",
					time.Duration(now-start), u, perUser[u], limit, r.capacity, r.perSecond, unassigned[u])
			}
		}
		allowed, bound = perUser[0], r.capacity+refill+unassigned[0]
	}
	return allowed, bound
}

// TestBoundSimulated: no Envoy configuration, phase, reporting interval,
// demand or delivery delay within the slack, and no number of tokengate
// replicas sharing the store, lets the Envoys together allow more than
// the bound, at any instant.
func TestBoundSimulated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := boundRun{
			capacity:      rapid.Int64Range(1, 400).Draw(t, "capacity"),
			perSecond:     rapid.Int64Range(1, 200).Draw(t, "perSecond"),
			noAssignAllow: rapid.Bool().Draw(t, "noAssignAllow"),
			replicas:      rapid.IntRange(1, 3).Draw(t, "replicas"),
			concurrency:   rapid.IntRange(1, 4).Draw(t, "concurrency"),
		}
		for i := range rapid.IntRange(1, 4).Draw(t, "envoys") {
			r.envoys = append(r.envoys, boundEnvoy{
				interval: time.Duration(rapid.IntRange(5, 10).Draw(t, fmt.Sprint("interval", i))) * 100 * time.Millisecond,
				phase:    time.Duration(rapid.IntRange(0, 300).Draw(t, fmt.Sprint("phase", i))) * boundStep,
				delay:    time.Duration(rapid.IntRange(0, 25).Draw(t, fmt.Sprint("delay", i))) * boundStep,
				perStep:  rapid.IntRange(0, 6).Draw(t, fmt.Sprint("perStep", i)),
				users:    rapid.IntRange(1, 2).Draw(t, fmt.Sprint("users", i)),
			})
		}
		r.simulate(t)
	})
}

// TestBoundUsesTheRate: the bound is not met by refusing: with demand
// twice the rate and a bucket that holds a lease's float, three Envoys
// (one of them idle) together allow most of what the rule allows. On two
// replicas less: each replica shares the whole rate among its own
// streams, so their leases compete for the bucket and are renewed
// smaller, each renewal a burst paid again (docs/rlqs.md).
func TestBoundUsesTheRate(t *testing.T) {
	for _, tc := range []struct {
		replicas int
		percent  int64
	}{{1, 80}, {2, 70}} {
		t.Run(fmt.Sprint(tc.replicas, " replicas"), func(t *testing.T) {
			r := boundRun{capacity: 400, perSecond: 100, replicas: tc.replicas, envoys: []boundEnvoy{
				{interval: time.Second, perStep: 1, users: 1},
				{interval: 700 * time.Millisecond, phase: 130 * time.Millisecond, delay: 50 * time.Millisecond, perStep: 1, users: 1},
				{interval: 900 * time.Millisecond, phase: 470 * time.Millisecond, delay: 200 * time.Millisecond, perStep: 0, users: 1},
			}}
			allowed, bound := r.simulate(t)
			if allowed*100 < bound*tc.percent {
				t.Fatalf("allowed %d of the bound %d: under %d%%", allowed, bound, tc.percent)
			}
			t.Logf("allowed %d, bound %d (%d%%)", allowed, bound, allowed*100/bound)
		})
	}
}
