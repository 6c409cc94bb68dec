package memory

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestCollector: the store's collector says what Stats says, under the
// metric names dashboards know.
func TestCollector(t *testing.T) {
	s := New(Options{Shards: 1, MaxBuckets: 1, EvictionSample: 64})
	v := storetest.Version(t, 1, 10, "1/h")
	decide(t, s, 0, "id", store.Item{Key: "a", Version: v, Cost: 1})
	decide(t, s, 0, "id", store.Item{Key: "a", Version: v, Cost: 1})
	decide(t, s, sec, "", store.Item{Key: "b", Version: v, Cost: 1})
	post := storetest.PostPaidVersion(t, 2, 10, "1/h", 10)
	decide(t, s, sec, "r", reserveItem("c", post, 2, sec)) // evicts b
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	want := `
# HELP tokengate_bucket_evictions_total Buckets the store dropped, by reason: full (lost nothing), removed (rule left the policy), idle (cap reached: its owner gets a fresh burst), expired (a calendar budget's period ended).
# TYPE tokengate_bucket_evictions_total counter
tokengate_bucket_evictions_total{reason="expired"} 0
tokengate_bucket_evictions_total{reason="full"} 0
tokengate_bucket_evictions_total{reason="idle"} 2
tokengate_bucket_evictions_total{reason="removed"} 0
# HELP tokengate_buckets Buckets held by the store now.
# TYPE tokengate_buckets gauge
tokengate_buckets 1
# HELP tokengate_idempotent_replays_total Answers replayed for a repeated request id.
# TYPE tokengate_idempotent_replays_total counter
tokengate_idempotent_replays_total 1
# HELP tokengate_reservations Reservations (a reserve rule's checks) held now, waiting for their reports.
# TYPE tokengate_reservations gauge
tokengate_reservations 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tokengate_buckets", "tokengate_bucket_evictions_total", "tokengate_idempotent_replays_total", "tokengate_reservations"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(s.Collector()); n != 14 {
		t.Fatalf("%d metrics, want 14", n)
	}
}
