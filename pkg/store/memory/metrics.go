package memory

import "github.com/prometheus/client_golang/prometheus"

// The store's metrics, read from Stats when Prometheus scrapes.
var (
	descBuckets   = prometheus.NewDesc("tokengate_buckets", "Buckets held by the store now.", nil, nil)
	descDropped   = prometheus.NewDesc("tokengate_bucket_evictions_total", "Buckets the store dropped, by reason: full (lost nothing), removed (rule left the policy), idle (cap reached: its owner gets a fresh burst), expired (a calendar budget's period ended).", []string{"reason"}, nil)
	descContended = prometheus.NewDesc("tokengate_lock_contended_total", "Shard lock acquisitions that had to wait.", nil, nil)
	descLockWait  = prometheus.NewDesc("tokengate_lock_wait_seconds_total", "Total time spent waiting for shard locks.", nil, nil)
	descReplays   = prometheus.NewDesc("tokengate_idempotent_replays_total", "Answers replayed for a repeated request id.", nil, nil)
	descRefused   = prometheus.NewDesc("tokengate_idempotent_refused_total", "Repeats of a request id decided anew: other buckets or costs, or its replays used up.", nil, nil)
	descForgotten = prometheus.NewDesc("tokengate_request_ids_forgotten_total", "Request ids forgotten before their window ended (table full).", nil, nil)
	descHolds     = prometheus.NewDesc("tokengate_reservations", "Reservations (a reserve rule's checks) held now, waiting for their reports.", nil, nil)
	descHoldsGone = prometheus.NewDesc("tokengate_reservations_unsettled_total", "Reservations that ended without their report, by reason: expired (returned after reserve_ttl), dropped (with their bucket).", []string{"reason"}, nil)
	descHoldsNone = prometheus.NewDesc("tokengate_reservations_refused_total", "Checks of a reserve rule that held nothing because the store held its maximum of reservations.", nil, nil)
)

// Collector exports the store's metrics: each scrape takes one Stats.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuckets, descDropped, descContended, descLockWait, descReplays, descRefused, descForgotten, descHolds, descHoldsGone, descHoldsNone} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(st.Buckets))
	for r, n := range st.Dropped {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n), Reason(r).String())
	}
	ch <- prometheus.MustNewConstMetric(descContended, prometheus.CounterValue, float64(st.Contended))
	ch <- prometheus.MustNewConstMetric(descLockWait, prometheus.CounterValue, st.LockWait.Seconds())
	ch <- prometheus.MustNewConstMetric(descReplays, prometheus.CounterValue, float64(st.Replays))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.NotReplayed))
	ch <- prometheus.MustNewConstMetric(descForgotten, prometheus.CounterValue, float64(st.IDsForgotten))
	ch <- prometheus.MustNewConstMetric(descHolds, prometheus.GaugeValue, float64(st.Reservations))
	ch <- prometheus.MustNewConstMetric(descHoldsGone, prometheus.CounterValue, float64(st.HoldsExpired), "expired")
	ch <- prometheus.MustNewConstMetric(descHoldsGone, prometheus.CounterValue, float64(st.HoldsDropped), "dropped")
	ch <- prometheus.MustNewConstMetric(descHoldsNone, prometheus.CounterValue, float64(st.HoldsRefused))
}
