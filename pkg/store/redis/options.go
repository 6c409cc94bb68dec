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
//
// What can be turned off is off at 0, as in tokengate serve's flags: the
// admission budget (Admission.Budget), batching (Batch.MaxInFlight), the
// deny cache (DenyCacheBytes) and the breaker's window (Breaker.Window).
// Their zero must still be the default, so each is a pointer: nil takes
// the default, a pointer to 0 turns it off (new(0) makes one), a pointer
// to any other value sets it. None may be negative.
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
	// answer over-limit requests without Redis (deny.go) [nil: 1 MiB, or
	// off with RequestTime]; 0 turns the cache off.
	DenyCacheBytes *int
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
	if err := o.Breaker.Check(); err != nil {
		return o, fmt.Errorf("redis: %w", err)
	}
	for _, f := range []struct {
		name string
		n    *int
	}{{"DenyCacheBytes", o.DenyCacheBytes}, {"Batch.MaxInFlight", o.Batch.MaxInFlight}} {
		if f.n != nil && *f.n < 0 {
			return o, fmt.Errorf("redis: %s %d: want 0 for off, or more", f.name, *f.n)
		}
	}
	switch {
	case o.DenyCacheBytes == nil && o.RequestTime:
		// Tests that drive time run it backwards, where a local answer
		// (a cursor not advanced in Redis) leaves fewer tokens than the
		// memory store would: off, unless a test asks for it.
		o.DenyCacheBytes = new(0)
	case o.DenyCacheBytes == nil:
		o.DenyCacheBytes = new(1 << 20)
	}
	if o.DenyCacheAge <= 0 {
		o.DenyCacheAge = time.Second
	}
	return o, nil
}
