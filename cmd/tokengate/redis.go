package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/local"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/store/redis"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// redisSettings are the --redis-* knobs of --store redis. The password is
// never a flag (it would show in the process list): it comes from
// TOKENGATE_REDIS_PASSWORD, the settings file's redis-password, the URL, or
// --redis-password-file.
type redisSettings struct {
	URL            string
	Password       string
	PasswordFile   string
	CAFile         string
	TLS            bool
	CertFile       string
	KeyFile        string
	Username       string
	DB             int
	PoolSize       int
	Timeout        time.Duration
	DialTimeout    time.Duration
	SentinelMaster string
	Cluster        bool
	KeyPrefix      string
	LocalShare     float64
	// Admission (redis.AdmissionOptions): a budget of 0 turns it off.
	AdmissionBudget     int
	AdmissionHeavyShare float64
	AdmissionLight      int
	AdmissionWait       time.Duration
	// The deny cache (redis.Options): 0 bytes turns it off.
	DenyCacheBytes     int
	DenyCacheAge       time.Duration
	ClockStepTolerance time.Duration
	// Batching (redis.BatchOptions): 0 calls in flight turns it off.
	BatchInFlight int
	BatchMaxItems int
	// WatchEvery is how often Redis is pinged to log it lost or back,
	// traffic or not (redisWatchEvery; not a flag, tests shorten it).
	WatchEvery time.Duration
}

// redisFlags are the flags of the redisconn.Config fields that Dial's
// errors name, so that they name what a user of tokengate sets.
var redisFlags = map[string]string{
	"Addr": "--redis-addr", "URL": "--redis-url", "CAFile": "--redis-ca-file",
	"CertFile": "--redis-cert-file", "KeyFile": "--redis-key-file", "Cluster": "--redis-cluster",
	"Username": "--redis-username", "Password": "--redis-password-file",
}

// redisWatchEvery pings Redis once a second: a change is logged within a
// second, and an open circuit probes again at once when Redis answers.
const redisWatchEvery = time.Second

func (r redisSettings) check() error {
	switch {
	case r.Timeout <= 0 || r.DialTimeout <= 0:
		return fmt.Errorf("--redis-timeout and --redis-dial-timeout must be positive")
	case r.PoolSize < 0 || r.DB < 0:
		return fmt.Errorf("--redis-pool-size and --redis-db must not be negative")
	case !(r.LocalShare > 0 && r.LocalShare <= 1):
		return fmt.Errorf("--redis-local-share %v: want a fraction in (0, 1]", r.LocalShare)
	case r.Cluster && r.SentinelMaster != "":
		return fmt.Errorf("--redis-cluster and --redis-sentinel-master exclude each other")
	case r.Cluster && r.DB != 0:
		return fmt.Errorf("--redis-db: a Redis Cluster has only database 0")
	case r.AdmissionBudget < 0:
		return fmt.Errorf("--redis-admission-budget %d: want a number of buckets, or 0 to turn admission off", r.AdmissionBudget)
	case !(r.AdmissionHeavyShare > 0 && r.AdmissionHeavyShare <= 1):
		return fmt.Errorf("--redis-admission-heavy-share %v: want a fraction in (0, 1]", r.AdmissionHeavyShare)
	case r.AdmissionLight < 1:
		return fmt.Errorf("--redis-admission-light %d: want at least 1", r.AdmissionLight)
	case r.AdmissionWait < 0 || r.AdmissionWait >= r.Timeout:
		return fmt.Errorf("--redis-admission-wait %v: want 0 (half of --redis-timeout) or less than --redis-timeout %v", r.AdmissionWait, r.Timeout)
	case r.DenyCacheBytes < 0:
		return fmt.Errorf("--redis-deny-cache-bytes %d: want a size, or 0 to turn the cache off", r.DenyCacheBytes)
	case r.BatchInFlight < 0 || r.BatchMaxItems < 1:
		return fmt.Errorf("--redis-batch-in-flight %d, --redis-batch-max-items %d: want calls in flight (0: no batching) and at least 1 bucket", r.BatchInFlight, r.BatchMaxItems)
	case r.DenyCacheAge <= 0 || r.ClockStepTolerance <= 0:
		return fmt.Errorf("--redis-deny-cache-age and --redis-clock-step-tolerance must be positive")
	}
	return nil
}

// storeOptions are the options of the Redis store. A setting of 0 turns
// its feature off there too; each is set, so the store's defaults (its
// nil) never apply.
func (r redisSettings) storeOptions(replayWindow time.Duration, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) redis.Options {
	return redis.Options{
		KeyPrefix: r.KeyPrefix, Timeout: r.Timeout, ReplayWindow: replayWindow,
		ClockStepTolerance: r.ClockStepTolerance,
		Admission: redis.AdmissionOptions{
			Budget: new(r.AdmissionBudget), HeavyShare: r.AdmissionHeavyShare, Light: r.AdmissionLight, Wait: r.AdmissionWait,
		},
		DenyCacheBytes: new(r.DenyCacheBytes), DenyCacheAge: r.DenyCacheAge,
		Batch: redis.BatchOptions{MaxInFlight: new(r.BatchInFlight), MaxItems: r.BatchMaxItems},
		Clock: clk, Registerer: reg, Logger: log,
	}
}

// backend is the store serve decides with, and what goes with it.
type backend struct {
	name  string
	store store.Store
	local store.Store // on_store_error: local's budget; nil for memory
	// candidate holds the candidate policy's buckets apart from the live
	// ones; nil without --candidate-policy.
	candidate store.Store
	// health reports why the store cannot decide now (server.Options.Store);
	// nil: it always can.
	health func() error
	// ready reports why the store has never decided yet (Redis has not
	// answered since the start), which keeps tokengate unready; nil: it
	// always could.
	ready func() error
	close func()
}

// openRedis opens the Redis store (redis.Open), with the local budget of
// on_store_error: local, both with their metrics on reg. A setting wrong
// in itself (a bad URL, a CA file that does not read) stops the start,
// naming its flag (redisFlags). Otherwise tokengate serves, but is not
// ready until Redis has answered once (ready), the reason on /readyz:
// Redis down, a name that does not resolve, credentials or TLS settings
// Redis refuses; the store keeps connecting in the background, so that it
// gets ready without a restart once Redis or the settings on its side are
// right. From then on a lost Redis leaves it ready, every rule's
// on_store_error answering. Once connected, the store checks Redis's
// memory settings once and logs Redis lost and back until ctx ends or the
// backend is closed.
func openRedis(ctx context.Context, s settings, reg prometheus.Registerer, clk clock.Clock, log *slog.Logger) (*backend, error) {
	r := s.Redis
	password := r.Password
	if r.PasswordFile != "" {
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	budget, err := local.New(local.Options{Share: r.LocalShare, Memory: memory.Options{MaxBuckets: s.MaxBuckets, ReplayWindow: s.ReplayWindow, Clock: clk}})
	if err != nil {
		return nil, err
	}
	go budget.Run(ctx, s.JanitorInterval)
	conn := redisconn.Config{
		Addr: s.RedisAddr, URL: r.URL, Password: password, DB: r.DB, PoolSize: r.PoolSize,
		DialTimeout: r.DialTimeout, SentinelMaster: r.SentinelMaster, Cluster: r.Cluster, CAFile: r.CAFile,
		TLS: r.TLS, CertFile: r.CertFile, KeyFile: r.KeyFile, Username: r.Username, Names: redisFlags,
	}
	if n := conn.PoolConnections(); n > 0 && n != r.PoolSize {
		log.Info("redis pool size rounded: the client pipelines over a power of two of connections a node, at most 256",
			slog.Int("redis_pool_size", r.PoolSize), slog.Int("connections", n))
	}
	st, err := redis.Open(ctx, redis.OpenOptions{
		Conn:           conn,
		Store:          r.storeOptions(s.ReplayWindow, clk, reg, log),
		Candidate:      s.CandidatePolicy != "",
		WatchEvery:     r.WatchEvery,
		ConnectedAttrs: []slog.Attr{slog.Float64("local_share", r.LocalShare)},
	})
	if err != nil {
		return nil, fmt.Errorf("--store redis: %w", err)
	}
	return &backend{
		name: "redis", store: st, local: budget, candidate: st.Candidate(),
		health: func() error { return st.Health(context.Background()) }, ready: st.Ready, close: st.Close,
	}, nil
}
