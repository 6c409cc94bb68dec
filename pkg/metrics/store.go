package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// StoreStats is what a store reports about itself at scrape time.
type StoreStats struct {
	Buckets      int
	Dropped      map[string]uint64 // by reason: full, removed, idle
	Contended    uint64            // lock acquisitions that waited
	LockWaitSecs float64           // total time those waited
	Replays      uint64            // answers replayed for a repeated request id
	NotReplayed  uint64            // repeats of an id decided anew (other items, replays used up)
	IDsForgotten uint64            // request ids forgotten before their window
}

// storeCollector reads a store's counters when Prometheus scrapes.
type storeCollector struct {
	stats     func() StoreStats
	buckets   *prometheus.Desc
	dropped   *prometheus.Desc
	contended *prometheus.Desc
	lockWait  *prometheus.Desc
	replays   *prometheus.Desc
	refused   *prometheus.Desc
	forgotten *prometheus.Desc
}

// RegisterStore registers a collector that calls stats at every scrape.
func RegisterStore(reg prometheus.Registerer, stats func() StoreStats) {
	reg.MustRegister(&storeCollector{
		stats:     stats,
		buckets:   prometheus.NewDesc("tokengate_buckets", "Buckets held by the store now.", nil, nil),
		dropped:   prometheus.NewDesc("tokengate_bucket_evictions_total", "Buckets the store dropped, by reason: full (lost nothing), removed (rule left the policy), idle (cap reached: its owner gets a fresh burst).", []string{"reason"}, nil),
		contended: prometheus.NewDesc("tokengate_lock_contended_total", "Shard lock acquisitions that had to wait.", nil, nil),
		lockWait:  prometheus.NewDesc("tokengate_lock_wait_seconds_total", "Total time spent waiting for shard locks.", nil, nil),
		replays:   prometheus.NewDesc("tokengate_idempotent_replays_total", "Answers replayed for a repeated request id.", nil, nil),
		refused:   prometheus.NewDesc("tokengate_idempotent_refused_total", "Repeats of a request id decided anew: other buckets or costs, or its replays used up.", nil, nil),
		forgotten: prometheus.NewDesc("tokengate_request_ids_forgotten_total", "Request ids forgotten before their window ended (table full).", nil, nil),
	})
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buckets, c.dropped, c.contended, c.lockWait, c.replays, c.refused, c.forgotten} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(st.Buckets))
	for reason, n := range st.Dropped {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(c.contended, prometheus.CounterValue, float64(st.Contended))
	ch <- prometheus.MustNewConstMetric(c.lockWait, prometheus.CounterValue, st.LockWaitSecs)
	ch <- prometheus.MustNewConstMetric(c.replays, prometheus.CounterValue, float64(st.Replays))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.NotReplayed))
	ch <- prometheus.MustNewConstMetric(c.forgotten, prometheus.CounterValue, float64(st.IDsForgotten))
}
