package rlqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/logtest"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
)

// secretValue is a client's value no line may show.
const secretValue = "alice-4f1c9e"

// loggedFixture is a fixture whose service writes its decision log, at
// debug, PerSecond lines a second of each level, to the recorder.
func loggedFixture(t *testing.T, perSecond int) (*fixture, *logtest.Recorder, *keyhash.Key) {
	rec := &logtest.Recorder{Level: slog.LevelDebug}
	keys := keyhash.Random()
	f := newFixture(t, testPolicy, Options{
		DecisionLog: service.DecisionLog{Logger: rec.Logger(), PerSecond: perSecond}, KeyHash: keys,
	})
	return f, rec, keys
}

// noRawKey fails when a line shows secretValue.
func noRawKey(t *testing.T, recs []logtest.Record) {
	t.Helper()
	for _, r := range recs {
		for k, v := range r.Attrs {
			if strings.Contains(v, secretValue) {
				t.Fatalf("line %q shows the client's value in %s=%q", r.Message, k, v)
			}
		}
	}
}

// TestDecisionLogAssignment: a new token bucket is a debug line naming
// the bucket as ShouldRateLimit's decision log does, and the next report's
// refresh another; neither shows the client's value.
func TestDecisionLogAssignment(t *testing.T) {
	f, rec, keys := loggedFixture(t, 100)
	c := f.open()
	id := map[string]string{"user": secretValue, "path": "/api/x"}
	tokenBucketOf(t, only(t, must(c.send(report("edge", id, 0, 1)))))
	f.clk.Add(time.Second)
	tokenBucketOf(t, only(t, must(c.send(report("", id, 4, 0)))))

	// The same bucket through ShouldRateLimit, on the same key.
	svc, err := service.New(service.Options{
		Policy: f.pol.Load, Store: f.store, Metrics: metrics.New(prometheus.NewRegistry()), Clock: f.clk,
		DecisionLog: service.DecisionLog{Logger: rec.Logger()}, KeyHash: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: secretValue}, {Key: "path", Value: "/api/x"}},
	}}}); err != nil {
		t.Fatal(err)
	}

	recs := rec.Records()
	noRawKey(t, recs)
	if len(recs) != 3 {
		t.Fatalf("lines %v, want two assignments and a decision", recs)
	}
	for i, why := range []string{WhyNew, WhyRefresh} {
		r := recs[i]
		want := map[string]string{
			service.MetaDomain: "edge", service.MetaRule: "per-user", service.MetaKey: recs[2].Attrs[service.MetaKey],
			MetaTokens: "10", MetaFillInterval: "1s", MetaTTL: "2s", MetaShare: "10", MetaWhy: why,
		}
		if r.Level != slog.LevelDebug || r.Message != MsgAssigned || fmt.Sprint(r.Attrs) != fmt.Sprint(want) {
			t.Fatalf("line %d: %v %q %v, want debug %q %v", i, r.Level, r.Message, r.Attrs, MsgAssigned, want)
		}
	}
	if recs[2].Message != service.MsgDecision || len(recs[2].Attrs[service.MetaKey]) != keyhash.Length {
		t.Fatalf("ShouldRateLimit's line %v", recs[2])
	}
}

// TestDecisionLogDenyAll: a bucket that cannot pay for a lease is a
// DENY_ALL and a line at info saying why.
func TestDecisionLogDenyAll(t *testing.T) {
	f, rec, _ := loggedFixture(t, 100)
	rec.Level = slog.LevelInfo // debug off: only the DENY_ALL is a line
	svc, err := service.New(service.Options{Policy: f.pol.Load, Store: f.store, Metrics: metrics.New(prometheus.NewRegistry()), Clock: f.clk})
	if err != nil {
		t.Fatal(err)
	}
	// per-path-user holds 7: spend them all.
	if _, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}, {Key: "user", Value: secretValue}},
	}}}); err != nil {
		t.Fatal(err)
	}
	a := only(t, must(f.open().send(report("edge", map[string]string{"path": "/x", "user": secretValue}, 0, 1))))
	if b, ok := blanketOf(a); !ok || b != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("action %v, want DENY_ALL", a)
	}
	recs := rec.Records()
	noRawKey(t, recs)
	if len(recs) != 1 || recs[0].Level != slog.LevelInfo || recs[0].Message != MsgDenied ||
		recs[0].Attrs[service.MetaRule] != "per-path-user" || recs[0].Attrs[service.MetaReason] != ReasonEmpty ||
		len(recs[0].Attrs[service.MetaKey]) != keyhash.Length {
		t.Fatalf("lines %v, want one %q at info", recs, MsgDenied)
	}
}

// failing is a store that fails every decision.
type failing struct{ store.Store }

func (failing) Decide(context.Context, *store.Request, []store.Result) (store.Outcome, error) {
	return store.Outcome{}, errors.New("the store is down")
}

// TestDecisionLogDegradedAndAbandon: a store that fails is a degraded
// line at info with the action sent (DENY_ALL: no lease is held), and an
// abandoned bucket a line at info.
func TestDecisionLogDegradedAndAbandon(t *testing.T) {
	f, rec, _ := loggedFixture(t, 100)
	svc := f.replica(prometheus.NewRegistry(), failing{f.store})
	a := only(t, must(f.openOn(svc).send(report("edge", map[string]string{"ip": secretValue}, 0, 1))))
	if b, ok := blanketOf(a); !ok || b != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("action %v, want DENY_ALL", a)
	}
	f.clk.Add(DefaultAbandonAfter + 1)
	svc.Tick(f.clk.Now())
	recs := rec.Records()
	noRawKey(t, recs)
	if len(recs) != 2 {
		t.Fatalf("lines %v, want a degraded one and an abandon", recs)
	}
	if r := recs[0]; r.Level != slog.LevelInfo || r.Message != MsgDegraded || r.Attrs[MetaAction] != actionDenyAll || r.Attrs[service.MetaRule] != "per-ip" {
		t.Fatalf("line %v, want %q of deny_all at info", r, MsgDegraded)
	}
	if r := recs[1]; r.Level != slog.LevelInfo || r.Message != MsgAbandoned || r.Attrs[service.MetaKey] != recs[0].Attrs[service.MetaKey] {
		t.Fatalf("line %v, want %q of the same bucket at info", r, MsgAbandoned)
	}
}

// TestDecisionLogBudget: 1,000 assignments in one second are the
// budget's lines; the first line of the next second says how many were
// dropped.
func TestDecisionLogBudget(t *testing.T) {
	const budget, n = 10, 1000
	f, rec, _ := loggedFixture(t, budget)
	c := f.open()
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := range n {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"ip": secretValue + strconv.Itoa(i)}}, NumRequestsDenied: 1,
		})
	}
	if rs := must(c.send(msg)); len(rs) != 1 || len(rs[0].GetBucketAction()) != n {
		t.Fatalf("responses %v", rs)
	}
	if got := len(rec.Records()); got != budget {
		t.Fatalf("%d lines for %d assignments, want the budget, %d", got, n, budget)
	}
	f.clk.Add(time.Second)
	must(c.send(report("edge", map[string]string{"ip": "one more"}, 0, 1)))
	recs := rec.Records()
	noRawKey(t, recs)
	if len(recs) != budget+1 || recs[budget].Attrs["dropped"] != strconv.Itoa(n-budget) {
		t.Fatalf("after a second: %d lines, the last %v; want %d, dropped=%d", len(recs), recs[len(recs)-1], budget+1, n-budget)
	}
	for _, r := range recs[:budget] {
		if _, ok := r.Attrs["dropped"]; ok {
			t.Fatalf("line %v says dropped before any was", r)
		}
	}
}
