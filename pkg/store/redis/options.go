package redis

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/pkg/clock"
)

// Options configure a Store. Client is required; zero fields take the
// defaults in brackets.
type Options struct {
	// Client talks to Redis: a single node, Sentinel or Cluster (see
	// redisconn.Dial). The Store does not close it.
	Client rueidis.Client
	// KeyPrefix starts every key the store writes ["tokengate:"].
	KeyPrefix string
	// Timeout bounds one Decide, round trips included [15ms]: under
	// Envoy's rate_limit filter timeout (20ms by default) with room for
	// the gRPC round trip, so that on_store_error answers in time.
	Timeout time.Duration
	// ReplayWindow is how long a request id's answer is kept [30s].
	ReplayWindow time.Duration
	// Clock is the clock Request.Now is read on [clock.NewMonotonic()];
	// the store maps it onto the replicas' shared clock (clock.go).
	Clock clock.Clock
	// ClockStepTolerance is the largest forward step of the Redis host's
	// wall clock that no bucket's key is expired early by (a key that
	// expired before its bucket was full would hand out a fresh bucket)
	// [6h]: every key lives that long past its bucket's full instant, up
	// to twice that.
	ClockStepTolerance time.Duration
	// RequestTime decides at Request.Now instead of the shared clock, and keeps
	// keys with no TTL. It is for tests that drive time (the conformance
	// suite); every process sharing a Redis must use the same clock, so a
	// deployment never sets it.
	RequestTime bool
	// Breaker tunes the circuit breaker (guards.go).
	Breaker BreakerOptions
	// Admission bounds this replica's Redis work in flight, weighted by
	// buckets, so that heavy requests cannot starve light ones (guards.go).
	Admission AdmissionOptions
	// Batch tunes how concurrent requests share calls (batch.go).
	Batch BatchOptions
	// BatchWith, when set, is a Store on the same Client whose batches
	// this one's calls join (Batch is then unused): a candidate policy's
	// store, say, whose decisions then share the live store's calls.
	BatchWith *Store
	// DenyCacheBytes bounds the snapshots of rejected buckets kept to
	// answer over-limit requests without Redis (deny.go) [1 MiB; off with
	// RequestTime]; < 0 turns the cache off.
	DenyCacheBytes int
	// DenyCacheAge is how long a snapshot answers at most [1s]: the
	// longest a refund or policy change made through another replica can
	// go unseen here.
	DenyCacheAge time.Duration
	// Registerer, when set, receives the store's metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // [slog.Default()]
}

// withDefaults is o checked, with its defaults in its zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = "tokengate:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = clock.NewMonotonic()
	}
	if o.ClockStepTolerance <= 0 {
		o.ClockStepTolerance = 6 * time.Hour
	}
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := o.Admission.Check(); err != nil {
		return o, fmt.Errorf("redis: %w", err)
	}
	switch {
	case o.DenyCacheBytes == 0 && o.RequestTime:
		// Tests that drive time run it backwards, where a local answer
		// (a cursor not advanced in Redis) leaves fewer tokens than the
		// memory store would: off, unless a test asks for it.
		o.DenyCacheBytes = -1
	case o.DenyCacheBytes == 0:
		o.DenyCacheBytes = 1 << 20
	}
	if o.DenyCacheAge <= 0 {
		o.DenyCacheAge = time.Second
	}
	return o, nil
}
