package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/local"
	"github.com/tokengate/tokengate/pkg/store/memory"
	"github.com/tokengate/tokengate/pkg/store/redis"
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
	DB             int
	PoolSize       int
	Timeout        time.Duration
	DialTimeout    time.Duration
	SentinelMaster string
	Cluster        bool
	KeyPrefix      string
	LocalShare     float64
	// WatchEvery is how often Redis is pinged to log it lost or back,
	// traffic or not (redisWatchEvery; not a flag, tests shorten it).
	WatchEvery time.Duration
}

// redisWatchEvery pings Redis once a second: a change is logged within a
// second, and an open circuit probes again at once when Redis answers.
const redisWatchEvery = time.Second

func addRedisFlags(fs *pflag.FlagSet) {
	fs.String("redis-url", "", "Redis URL, overrides --redis-addr: redis://[user:pass@]host:port[/db], rediss:// for TLS")
	fs.String("redis-ca-file", "", "PEM file of the CAs that sign Redis's TLS certificate; turns TLS on")
	fs.String("redis-password-file", "", "file holding the Redis password (or set TOKENGATE_REDIS_PASSWORD)")
	fs.Int("redis-db", 0, "Redis database number (not with --redis-cluster)")
	fs.Int("redis-pool-size", 0, "connections per Redis node, a power of two; commands are pipelined over them (0: 4, 1 per cluster node)")
	fs.Duration("redis-timeout", 15*time.Millisecond, "longest wait for Redis per decision, round trips included; then on_store_error decides. Keep it about 5ms under Envoy's rate_limit timeout (20ms by default), so that on_store_error answers before Envoy gives up")
	fs.Duration("redis-dial-timeout", time.Second, "longest wait to connect to Redis")
	fs.String("redis-sentinel-master", "", "Sentinel master set name; --redis-addr then lists the Sentinels, comma-separated")
	fs.Bool("redis-cluster", false, "require a Redis Cluster at --redis-addr (comma-separated seed nodes)")
	fs.String("redis-key-prefix", "tokengate:", "prefix of every Redis key")
	fs.Float64("redis-local-share", 1, "share of each rule's capacity and rate a replica may use while Redis fails (on_store_error: local); 1/replicas keeps the sum within the quota")
}

func readRedisSettings(v *viper.Viper) redisSettings {
	return redisSettings{
		URL:            v.GetString("redis-url"),
		Password:       v.GetString("redis-password"),
		PasswordFile:   v.GetString("redis-password-file"),
		CAFile:         v.GetString("redis-ca-file"),
		DB:             v.GetInt("redis-db"),
		PoolSize:       v.GetInt("redis-pool-size"),
		Timeout:        v.GetDuration("redis-timeout"),
		DialTimeout:    v.GetDuration("redis-dial-timeout"),
		SentinelMaster: v.GetString("redis-sentinel-master"),
		Cluster:        v.GetBool("redis-cluster"),
		KeyPrefix:      v.GetString("redis-key-prefix"),
		LocalShare:     v.GetFloat64("redis-local-share"),
		WatchEvery:     redisWatchEvery,
	}
}

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
	}
	return nil
}

// backend is the store serve decides with, and what goes with it.
type backend struct {
	name  string
	store store.Store
	local store.Store // on_store_error: local's budget; nil for memory
	// health reports why the store cannot decide now (server.Options.Store);
	// nil: it always can.
	health func() error
	close  func()
}

// openRedis builds the Redis store, with the local budget of
// on_store_error: local, both with their metrics on reg. When Redis cannot
// be reached at start, tokengate serves anyway (degraded, every rule's
// on_store_error answering) and keeps connecting in the background, so
// that replicas started during an outage recover when Redis returns; but a
// setting no retry can fix (redis.ErrConfig: a bad CA file, TLS on one side
// only, a wrong password, ...) stops the start, naming it. Once
// connected, Redis's memory settings are checked once (checkRedisLimits),
// and the store's Watch logs Redis lost and back until ctx ends or the
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
	cfg := redis.Config{
		Addr: s.RedisAddr, URL: r.URL, Password: password, DB: r.DB, PoolSize: r.PoolSize,
		DialTimeout: r.DialTimeout, SentinelMaster: r.SentinelMaster, Cluster: r.Cluster, CAFile: r.CAFile,
	}
	connect := func() (*connected, error) {
		client, err := redis.Dial(cfg)
		if err != nil {
			return nil, fmt.Errorf("--store redis: %w", err)
		}
		st, err := redis.New(redis.Options{
			Client: client, KeyPrefix: r.KeyPrefix, Timeout: r.Timeout, ReplayWindow: s.ReplayWindow,
			Clock: clk, Registerer: reg, Logger: log,
		})
		if err != nil {
			client.Close()
			return nil, err
		}
		log.Info("redis store connected", slog.String("mode", string(client.Mode())), slog.Bool("cluster", st.Cluster()),
			slog.Duration("timeout", r.Timeout), slog.Float64("local_share", r.LocalShare))
		return &connected{st, client}, nil
	}
	c, err := connect()
	if errors.Is(err, redis.ErrConfig) {
		return nil, err
	}
	// Closing the backend ends the watch before it closes the client, so
	// that a ping failing on the closed client is not logged as Redis lost.
	wctx, stopWatch := context.WithCancel(ctx)
	// The check of Redis's memory settings runs with the watch, once the
	// store serves, so that a slow CONFIG GET delays neither.
	lz := &lazyRedis{
		closed: make(chan struct{}),
		watch: func(c *connected) {
			go func() {
				checkRedisLimits(wctx, c.st, log)
				c.st.Watch(wctx, r.WatchEvery)
			}()
		},
		stopWatch: stopWatch,
	}
	if err != nil {
		log.Error("redis unreachable at start: serving with on_store_error, connecting in the background", slog.String("error", err.Error()))
		go lz.connect(wctx, connect, log)
	} else {
		lz.use(c)
	}
	return &backend{name: "redis", store: lz, local: budget, health: lz.health, close: lz.close}, nil
}

// checkRedisLimits says, once per store (at start, or when a background
// connect succeeds), whether Redis bounds tokengate's keys safely
// (redis.Store.CheckLimits; the README's "Redis store" says what to set),
// and takes the first sample of tokengate_redis_keys. Unsafe settings are
// a warning, not a refusal: they cost only under a flood of new keys, and
// an operator may have reasons (a bounded key space) to keep them.
func checkRedisLimits(ctx context.Context, st *redis.Store, log *slog.Logger) {
	l := st.CheckLimits(ctx)
	if ctx.Err() != nil {
		return // closed meanwhile: nothing to say about Redis
	}
	switch l.Verdict {
	case redis.LimitsUnsafe:
		log.Warn("redis does not bound tokengate's keys safely: a flood of distinct keys can fill its memory or evict drained buckets (which then come back full); set maxmemory and maxmemory-policy volatile-ttl",
			slog.String("reasons", strings.Join(l.Reasons(), ",")), slog.String("nodes", l.String()))
	case redis.LimitsUnknown:
		log.Info("redis memory settings not checked (CONFIG GET refused or failed): make sure maxmemory is set and maxmemory-policy is volatile-ttl",
			slog.String("nodes", l.String()))
	default:
		log.Debug("redis bounds tokengate's keys", slog.String("nodes", l.String()))
	}
	if _, err := st.SampleKeys(ctx); err != nil {
		log.Debug("redis key count not sampled", slog.String("error", err.Error()))
	}
}

// lazyRedis is the Redis store once connected; until then it fails every
// call with store.ErrUnavailable.
type lazyRedis struct {
	c         atomic.Pointer[connected]
	closed    chan struct{}
	once      sync.Once
	watch     func(*connected) // checks the store's limits and starts its Watch
	stopWatch context.CancelFunc
}

type connected struct {
	st     *redis.Store
	client rueidis.Client
}

var errNotConnected = fmt.Errorf("redis: %w: not connected yet", store.ErrUnavailable)

func (l *lazyRedis) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if c := l.c.Load(); c != nil {
		return c.st.Decide(ctx, req, results)
	}
	return store.Outcome{}, errNotConnected
}

func (l *lazyRedis) health() error {
	if c := l.c.Load(); c != nil {
		return c.st.Ping(context.Background())
	}
	return errNotConnected
}

// connect retries every second until it connects, ctx ends or the store
// is closed.
func (l *lazyRedis) connect(ctx context.Context, connect func() (*connected, error), log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for tries := 1; ; tries++ {
		select {
		case <-ctx.Done():
			return
		case <-l.closed:
			return
		case <-t.C:
		}
		c, err := connect()
		if err == nil {
			select {
			case <-l.closed: // closed meanwhile: do not leak the client
				c.client.Close()
			default:
				l.use(c)
			}
			return
		}
		if tries%30 == 0 {
			log.Warn("redis still unreachable", slog.Int("tries", tries), slog.String("error", err.Error()))
		}
	}
}

// use serves from c, and watches it.
func (l *lazyRedis) use(c *connected) {
	l.c.Store(c)
	l.watch(c)
}

func (l *lazyRedis) close() {
	l.once.Do(func() {
		l.stopWatch()
		close(l.closed)
		if c := l.c.Load(); c != nil {
			c.client.Close()
		}
	})
}
