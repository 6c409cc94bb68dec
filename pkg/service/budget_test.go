package service

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/store/redis"
)

const budgetPolicy = `
domains:
  edge:
    - name: llm
      match: [{key: user_id}]
      limits:
        - {capacity: 100, refill: 100/s}
        - {budget: 250, per: month, time_zone: Europe/Madrid}
`

// budgetService is a service of src on the memory store, its Compiler's
// anchor mapping reading 0 to wall.
func budgetService(t *testing.T, src string, wall time.Time) *fixture {
	t.Helper()
	return budgetServiceOn(t, src, wall, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) })
}

// budgetServiceOn is budgetService on the store newStore makes from the
// fixture's clock.
func budgetServiceOn(t *testing.T, src string, wall time.Time, newStore func(*clock.Fake) store.Store) *fixture {
	t.Helper()
	pol, err := (&policy.Compiler{Anchor: clock.AnchorAt(wall, 0)}).Compile("p.yaml", []byte(src), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	st := newStore(clk)
	svc, err := New(Options{Policy: func() *policy.Policy { return pol }, Store: st, StoreName: "memory", Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: svc, clk: clk, store: st}
}

// TestBudgetDSTDays: a daily budget spent half an hour into Madrid's DST
// days waits for the next midnight: 22.5 h into the day of 23 hours, 24.5 h
// into the day of 25.
func TestBudgetDSTDays(t *testing.T) {
	budgetDSTDays(t, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) })
}

// TestBudgetDSTDaysRedis: the same on a real redis-server, which decides
// each period's bucket as the memory store does.
func TestBudgetDSTDaysRedis(t *testing.T) {
	budgetDSTDays(t, redisStores(t, "dst"))
}

// redisStores makes Redis stores on one redis-server, each of its own key
// prefix (name and a count), so that fixtures share no bucket.
func redisStores(t *testing.T, name string) func(*clock.Fake) store.Store {
	client := redisClient(t)
	n := 0
	return func(clk *clock.Fake) store.Store {
		n++
		st, err := redis.New(redis.Options{Client: client, KeyPrefix: fmt.Sprintf("%s%d:", name, n), Timeout: 5 * time.Second, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

func budgetDSTDays(t *testing.T, newStore func(*clock.Fake) store.Store) {
	loc, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	const daily = "domains:\n  edge:\n    - name: d\n      match: [{key: user_id}]\n      limits:\n        - {budget: 5, per: day, time_zone: Europe/Madrid}\n"
	for _, c := range []struct {
		day   int
		month time.Month
		retry string
	}{{29, time.March, "81000"}, {25, time.October, "88200"}, {24, time.October, "84600"}} {
		f := budgetServiceOn(t, daily, time.Date(2026, c.month, c.day, 0, 30, 0, 0, loc), newStore)
		if r := f.call(t, 5, descr("user_id", "a")); r.OverallCode != ok {
			t.Fatalf("%v %d: the budget: %v", c.month, c.day, r)
		}
		r := f.call(t, 1, descr("user_id", "a"))
		if r.OverallCode != over || header(r, HeaderRetryAfter) != c.retry {
			t.Errorf("%v %d: %v, retry-after %q, want %s", c.month, c.day, r.OverallCode, header(r, HeaderRetryAfter), c.retry)
		}
		if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != mustParseSeconds(t, c.retry) {
			t.Errorf("%v %d: duration_until_reset %v, want %ss", c.month, c.day, d, c.retry)
		}
		f.clk.Set(int64(mustParseSeconds(t, c.retry)) - 1)
		if r := f.call(t, 1, descr("user_id", "a")); r.OverallCode != over {
			t.Errorf("%v %d: a nanosecond before midnight: %v", c.month, c.day, r.OverallCode)
		}
		f.clk.Set(int64(mustParseSeconds(t, c.retry)))
		if r := f.call(t, 5, descr("user_id", "a")); r.OverallCode != ok {
			t.Errorf("%v %d: at midnight: %v", c.month, c.day, r.OverallCode)
		}
	}
}

func mustParseSeconds(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBudgetAcrossMonthEnd: a calendar budget spent within its month
// refuses, with retry-after the time to the month's end, comes back whole
// at the boundary, and its past month's bucket is dropped by the sweep.
func TestBudgetAcrossMonthEnd(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	// Reading 0 is 2026-03-31 22:00 in Madrid: two hours to April.
	f := budgetService(t, budgetPolicy, time.Date(2026, 3, 31, 22, 0, 0, 0, loc))
	clk, st := f.clk, f.store.(*memory.Store)
	for range 2 {
		if r := f.call(t, 100, descr("user_id", "a")); r.OverallCode != ok {
			t.Fatalf("within the budget: %v", r)
		}
		clk.Add(time.Second)
	}
	// 50 left of the month's 250; the refilling band is full again.
	r := f.call(t, 60, descr("user_id", "a"))
	st0 := r.Statuses[0]
	wantLimit := &rlsv3RateLimit{Name: "llm", RequestsPerUnit: 250, Unit: monthUnit}
	if r.OverallCode != over || st0.LimitRemaining != 50 || st0.CurrentLimit.String() != wantLimit.String() || header(r, HeaderRetryAfter) != "7198" {
		t.Fatalf("over the budget: %v, remaining %d, limit %v, retry-after %q; want 50, %v, 7198 (to April)", r.OverallCode, st0.LimitRemaining, st0.CurrentLimit, header(r, HeaderRetryAfter), wantLimit)
	}
	if f.balance(t, "llm", 0, "user_id", "a") != 100 {
		t.Error("the refilling band was charged for a refused request")
	}
	// Nothing refills within the month.
	clk.Set(int64(2*time.Hour - time.Second))
	if r := f.call(t, 60, descr("user_id", "a")); r.OverallCode != over || header(r, HeaderRetryAfter) != "1" {
		t.Fatalf("a second before April: %v, retry-after %q", r.OverallCode, header(r, HeaderRetryAfter))
	}
	st.Sweep(clk.Now())
	if got := f.balance(t, "llm", 1, "user_id", "a"); got != 50 || st.Stats().Dropped[memory.Expired] != 0 {
		t.Errorf("after a sweep within the month the budget holds %d (want 50), %d expired", got, st.Stats().Dropped[memory.Expired])
	}
	// April: whole again; March's bucket expires.
	clk.Set(int64(2 * time.Hour))
	st.Sweep(clk.Now())
	if n := st.Stats().Dropped[memory.Expired]; n != 1 || st.Stats().Buckets != 0 {
		t.Errorf("the sweep at April expired %d buckets (want March's), %d left", n, st.Stats().Buckets)
	}
	if r := f.call(t, 100, descr("user_id", "a")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("in April: %v", r)
	}
	if got := f.balance(t, "llm", 1, "user_id", "a"); got != 150 {
		t.Errorf("April's budget holds %d, want 150", got)
	}
}

type rlsv3RateLimit = rlsv3.RateLimitResponse_RateLimit

const monthUnit = rlsv3.RateLimitResponse_RateLimit_MONTH

// TestBudgetModel: random requests over days and months in several zones
// (one with a 30-minute DST change), through the service and the memory
// store, against a plain model: what was spent per calendar date (or
// month) of the request's wall time in the zone.
func TestBudgetModel(t *testing.T) {
	budgetModel(t, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) })
}

// TestBudgetModelRedis: the same on a real redis-server.
func TestBudgetModelRedis(t *testing.T) {
	budgetModel(t, redisStores(t, "model"))
}

func budgetModel(t *testing.T, newStore func(*clock.Fake) store.Store) {
	rapid.Check(t, func(rt *rapid.T) {
		zone := rapid.SampledFrom([]string{"UTC", "Europe/Madrid", "America/New_York", "Australia/Lord_Howe"}).Draw(rt, "zone")
		loc, err := time.LoadLocation(zone)
		if err != nil {
			rt.Fatal(err)
		}
		per := rapid.SampledFrom([]string{"day", "week", "month"}).Draw(rt, "per")
		budget := rapid.Int64Range(1, 20).Draw(rt, "budget")
		start := time.Unix(rapid.Int64Range(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Unix()).Draw(rt, "start"), 0)
		src := "domains:\n  edge:\n    - name: b\n      match: [{key: k}]\n      limits:\n        - {budget: " + strconv.FormatInt(budget, 10) + ", per: " + per + ", time_zone: " + zone + "}\n"
		f := budgetServiceOn(t, src, start, newStore)
		// The model's period of a wall time: its date, its Monday's date,
		// or its month, in the zone; and when the next one starts.
		period := func(w time.Time) (string, time.Time) {
			l := w.In(loc)
			y, m, d := l.Date()
			switch per {
			case "week":
				d -= (int(l.Weekday()) + 6) % 7
				return time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Format("2006-01-02"), time.Date(y, m, d+7, 0, 0, 0, 0, loc)
			case "month":
				return l.Format("2006-01"), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
			}
			return l.Format("2006-01-02"), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		}
		spent := map[string]int64{}
		for range rapid.IntRange(1, 40).Draw(rt, "requests") {
			now := f.clk.Add(time.Duration(rapid.Int64Range(0, int64(40*time.Hour)).Draw(rt, "wait")))
			cost := rapid.Int64Range(1, budget).Draw(rt, "cost")
			wall := start.Add(time.Duration(now))
			id, next := period(wall)
			allowed := spent[id]+cost <= budget
			if allowed {
				spent[id] += cost
			}
			r := f.call(t, uint32(cost), descr("k", "v"))
			wantCode := ok
			if !allowed {
				wantCode = over
			}
			if r.OverallCode != wantCode || int64(r.Statuses[0].LimitRemaining) != budget-spent[id] {
				rt.Fatalf("%v (%s) cost %d: %v remaining %d, want %v remaining %d", wall.In(loc), id, cost, r.OverallCode, r.Statuses[0].LimitRemaining, wantCode, budget-spent[id])
			}
			if !allowed {
				want := strconv.FormatInt(CeilSeconds(next.Sub(wall)), 10)
				if got := header(r, HeaderRetryAfter); got != want {
					rt.Fatalf("%v: retry-after %q, want %q (to %v)", wall.In(loc), got, want, next)
				}
			}
		}
	})
}

// TestBudgetDebtForgivenAtBoundary: a report may take a post-paid budget
// into debt; checks are refused until the period ends, and the next
// period starts whole: the debt does not carry over.
func TestBudgetDebtForgivenAtBoundary(t *testing.T) {
	budgetDebtForgiven(t, func(clk *clock.Fake) store.Store { return memory.New(memory.Options{Clock: clk}) })
}

// TestBudgetDebtForgivenAtBoundaryRedis: the same on a real redis-server.
func TestBudgetDebtForgivenAtBoundaryRedis(t *testing.T) {
	budgetDebtForgiven(t, redisStores(t, "debt"))
}

func budgetDebtForgiven(t *testing.T, newStore func(*clock.Fake) store.Store) {
	const src = "domains:\n  edge:\n    - name: b\n      match: [{key: k}]\n      charge: after_response\n      limits:\n        - {budget: 100, per: day}\n"
	f := budgetServiceOn(t, src, time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC), newStore)
	if r := f.call(t, 0, hits(descr("k", "v"), 150)); r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a report into debt: %v", r)
	}
	if r := f.call(t, 0, descr("k", "v")); r.OverallCode != over || header(r, HeaderRetryAfter) != "3600" {
		t.Fatalf("a check in debt: %v, retry-after %q, want 3600 (to midnight)", r.OverallCode, header(r, HeaderRetryAfter))
	}
	f.clk.Set(int64(time.Hour))
	if r := f.call(t, 0, descr("k", "v")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 100 {
		t.Fatalf("the next day: %v, want the whole budget", r)
	}
}
