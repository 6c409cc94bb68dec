package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestCheckLimitsMetrics: the gauges say what CheckLimits found, for a
// server with Redis's defaults (unsafe twice over) and then with safe
// settings; each check is counted by its verdict.
func TestCheckLimitsMetrics(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{Registerer: prometheus.NewRegistry()})
	for _, tc := range []struct {
		set     [][2]string // CONFIG SET before the check
		verdict redisconn.LimitsVerdict
		reasons []string
	}{
		{nil, redisconn.LimitsUnsafe, []string{redisconn.ReasonNoMaxMemory, redisconn.ReasonNoEviction}},
		{[][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}}, redisconn.LimitsSafe, nil},
	} {
		for _, kv := range tc.set {
			if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
		if l := s.CheckLimits(context.Background()); l.Verdict != tc.verdict {
			t.Fatalf("after %v: %v (%s), want %v", tc.set, l.Verdict, l, tc.verdict)
		}
		for _, r := range redisconn.AllReasons {
			want := 0.0
			if slices.Contains(tc.reasons, r) {
				want = 1
			}
			if got := testutil.ToFloat64(s.metrics.configUnsafe.WithLabelValues(r)); got != want {
				t.Errorf("after %v: tokengate_redis_config_unsafe{reason=%q} = %v, want %v", tc.set, r, got, want)
			}
		}
		if got := testutil.ToFloat64(s.metrics.configChecks.WithLabelValues(tc.verdict.String())); got != 1 {
			t.Errorf("tokengate_redis_config_checks_total{result=%q} = %v, want 1", tc.verdict, got)
		}
	}
}

// TestSampleKeys: the gauge is the database's keys: every bucket written,
// and the clock key.
func TestSampleKeys(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{Registerer: prometheus.NewRegistry()})
	writeBuckets(t, s, 50)
	n, err := s.SampleKeys(context.Background())
	if err != nil || n != 51 {
		t.Fatalf("SampleKeys: %d %v, want 50 buckets and the clock key", n, err)
	}
	if got := testutil.ToFloat64(s.metrics.keys); got != 51 {
		t.Fatalf("tokengate_redis_keys = %v, want 51", got)
	}
}

// TestSampleKeysCluster: summed over the masters.
func TestSampleKeysCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := newStore(t, newClient(t, cl.Addrs()...), Options{})
	writeBuckets(t, s, 50)
	if n, err := s.SampleKeys(context.Background()); err != nil || n != 51 {
		t.Fatalf("SampleKeys: %d %v, want 50 buckets and the clock key", n, err)
	}
}

// writeBuckets drains n distinct buckets of a slow rule, so none is full.
func writeBuckets(t *testing.T, s *Store, n int) {
	t.Helper()
	v := storetest.Version(t, 1, 10, "1/h")
	for i := range n {
		res := make([]store.Result, 1)
		item := store.Item{Key: "k" + strconv.Itoa(i), Version: v, Cost: 10, Revision: 1}
		if _, err := s.Decide(context.Background(), &store.Request{Now: s.opts.Clock.Now(), Items: []store.Item{item}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("bucket %d: %+v %v", i, res[0], err)
		}
	}
}
