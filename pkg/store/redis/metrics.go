package redis

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

type storeMetrics struct {
	errors      *prometheus.CounterVec
	breakerOpen prometheus.Gauge
	reloads     prometheus.Counter
	crossSlot   prometheus.Counter
	settles     *prometheus.CounterVec
	replays     prometheus.Counter
	idWaits     prometheus.Counter
	denyHits    prometheus.Counter
	inFlight    *prometheus.GaugeVec
	// batch.go, ambiguous.go, store.go
	batches, batched prometheus.Counter
	decisions        *prometheus.CounterVec
	lean, general    prometheus.Counter // decisions' two paths
	ambiguous        *prometheus.CounterVec
	// health.go
	configUnsafe *prometheus.GaugeVec
	configChecks *prometheus.CounterVec
	keys         prometheus.Gauge
}

// newStoreMetrics creates the store's metrics, registered on reg when it
// is not nil.
func newStoreMetrics(reg prometheus.Registerer) *storeMetrics {
	m := &storeMetrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_redis_errors_total",
			Help: "Redis store calls that failed, by reason: timeout, error, circuit_open (not tried), shed (not admitted within the timeout: too much work in flight), queued (never sent: waited past its deadline behind the calls in flight).",
		}, []string{"reason"}),
		breakerOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokengate_redis_circuit_open",
			Help: "Redis circuit breakers open now (calls fail fast): 1 or 0, on a Cluster one per master node whose circuit is open.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_script_reloads_total",
			Help: "Calls that found the code missing (the function library gone, or NOSCRIPT) and sent it again.",
		}),
		crossSlot: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_cross_slot_requests_total",
			Help: "Requests whose buckets live on several Cluster nodes (or in several slots, while batching is off or the nodes are not known), decided by reserve and settle.",
		}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_redis_settles_total",
			Help: "Settle calls of cross-slot requests by kind (rollback, commit) and result (ok, error).",
		}, []string{"kind", "result"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_replays_total",
			Help: "Answers replayed from Redis for a repeated request id.",
		}),
		denyHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_deny_cache_hits_total",
			Help: "Requests rejected from snapshots of buckets Redis had just rejected, without calling Redis.",
		}),
		idWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_request_id_waits_total",
			Help: "Requests that waited for a concurrent call with the same request id.",
		}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tokengate_redis_in_flight_items",
			Help: "Items (buckets) of the decisions admitted to Redis and not yet answered, by class (light, heavy).",
		}, []string{"class"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_batches_total",
			Help: "Calls that carried the decisions of several requests at once (batch.go).",
		}),
		batched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokengate_redis_batched_requests_total",
			Help: "Requests decided in a call shared with others; divided by tokengate_redis_batches_total, the mean batch.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_redis_decisions_total",
			Help: "Requests Redis decided, by the script's path: lean (the usual: buckets stored under their version, or new, in plain numbers, no request id) or general (request ids, repeated buckets, policy changes, numbers past 2^52); a request across Cluster nodes is lean when every node's reserve was.",
		}, []string{"path"}),
		ambiguous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_redis_ambiguous_total",
			Help: "Requests whose call was sent and timed out (it may have charged), by what its late answer or request id said: uncharged, kept (charged, and the request went through), refunded (charged, the request was refused: refunded), refund_failed, unknown (no answer, no id: a charge stays if there was one).",
		}, []string{"outcome"}),
		configUnsafe: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tokengate_redis_config_unsafe",
			Help: "1 when the last check of Redis's settings found a node with this reason (no_maxmemory, noeviction, policy: a maxmemory-policy other than volatile-ttl), else 0.",
		}, []string{"reason"}),
		configChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_redis_config_checks_total",
			Help: "Checks of Redis's maxmemory and maxmemory-policy by result: safe, unsafe, unknown (CONFIG refused, as on managed Redis, or failed).",
		}, []string{"result"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokengate_redis_keys",
			Help: "Keys in tokengate's Redis database at the last sample (DBSIZE, summed over a Cluster's masters): buckets, request ids, the clock key and anything else there. The same value from every replica.",
		}),
	}
	m.lean, m.general = m.decisions.WithLabelValues("lean"), m.decisions.WithLabelValues("general")
	for _, o := range []string{"uncharged", "kept", "refunded", "refund_failed", "unknown"} {
		m.ambiguous.WithLabelValues(o)
	}
	for _, r := range redisconn.AllReasons {
		m.configUnsafe.WithLabelValues(r)
	}
	for _, v := range []redisconn.LimitsVerdict{redisconn.LimitsSafe, redisconn.LimitsUnsafe, redisconn.LimitsUnknown} {
		m.configChecks.WithLabelValues(v.String())
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// all are the store's metrics.
func (m *storeMetrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.errors, m.breakerOpen, m.reloads, m.crossSlot, m.settles, m.replays, m.idWaits, m.inFlight,
		m.denyHits, m.batches, m.batched, m.decisions, m.ambiguous, m.configUnsafe, m.configChecks, m.keys}
}

// Describe and Collect make the store's metrics one prometheus.Collector
// (Store exports it).
func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}
