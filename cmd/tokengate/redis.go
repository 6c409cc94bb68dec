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

// storeOptions are the options of the Redis store on client. A setting of
// 0 that turns a feature off is the store's -1.
func (r redisSettings) storeOptions(client rueidis.Client, replayWindow time.Duration, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) redis.Options {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return redis.Options{
		Client: client, KeyPrefix: r.KeyPrefix, Timeout: r.Timeout, ReplayWindow: replayWindow,
		ClockStepTolerance: r.ClockStepTolerance,
		Admission: redis.AdmissionOptions{
			Budget: off(r.AdmissionBudget), HeavyShare: r.AdmissionHeavyShare, Light: r.AdmissionLight, Wait: r.AdmissionWait,
		},
		DenyCacheBytes: off(r.DenyCacheBytes), DenyCacheAge: r.DenyCacheAge,
		Batch: redis.BatchOptions{MaxInFlight: off(r.BatchInFlight), MaxItems: r.BatchMaxItems},
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
	close  func()
}

// openRedis builds the Redis store, with the local budget of
// on_store_error: local, both with their metrics on reg. When Redis cannot
// be reached at start, tokengate serves anyway (degraded, every rule's
// on_store_error answering) and keeps connecting in the background, so
// that replicas started during an outage recover when Redis returns; but a
// setting no retry can fix (redisconn.ErrConfig: a bad CA file, TLS on one
// side only, a wrong password, ...) stops the start, naming its flag. Once
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
	cfg := redisconn.Config{
		Addr: s.RedisAddr, URL: r.URL, Password: password, DB: r.DB, PoolSize: r.PoolSize,
		DialTimeout: r.DialTimeout, SentinelMaster: r.SentinelMaster, Cluster: r.Cluster, CAFile: r.CAFile,
		TLS: r.TLS, CertFile: r.CertFile, KeyFile: r.KeyFile, Username: r.Username, Names: redisFlags,
	}
	connect := func() (*connected, error) {
		client, err := redisconn.Dial(cfg)
		if err != nil {
			return nil, fmt.Errorf("--store redis: %w", err)
		}
		st, err := redis.New(r.storeOptions(client, s.ReplayWindow, clk, reg, log))
		if err != nil {
			client.Close()
			return nil, err
		}
		prepare(st, r.DialTimeout, log)
		c := &connected{st: st, client: client}
		if s.CandidatePolicy != "" {
			// The same client, its own key space; no metrics (they would
			// be the live store's names twice).
			o := r.storeOptions(client, s.ReplayWindow, clk, nil, log.With(slog.String("policy", "candidate")))
			o.KeyPrefix = candidateKeyPrefix(r.KeyPrefix)
			o.BatchWith = st // its decisions join the live store's calls
			if c.candidate, err = redis.New(o); err != nil {
				client.Close()
				return nil, err
			}
			prepare(c.candidate, r.DialTimeout, log)
		}
		return c, nil
	}
	c, err := connect()
	if errors.Is(err, redisconn.ErrConfig) {
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
			// Logged once the store serves, so that whoever sees the line
			// finds the store in use.
			log.Info("redis store connected", slog.String("mode", string(c.client.Mode())), slog.Bool("cluster", c.st.Cluster()),
				slog.Duration("timeout", r.Timeout), slog.Float64("local_share", r.LocalShare))
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
	be := &backend{name: "redis", store: lz, local: budget, health: lz.health, close: lz.close}
	if s.CandidatePolicy != "" {
		be.candidate = lazyCandidate{lz}
	}
	return be, nil
}

// prepare loads the store's code and anchors its clock before it serves
// (redis.Store.Prepare), within timeout; a failure is left to the first
// decision.
func prepare(st *redis.Store, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := st.Prepare(ctx); err != nil {
		log.Debug("redis: not prepared at start; the first decision will", slog.String("error", err.Error()))
	}
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
	case redisconn.LimitsUnsafe:
		log.Warn("redis does not bound tokengate's keys safely: a flood of distinct keys can fill its memory or evict drained buckets (which then come back full); set maxmemory and maxmemory-policy volatile-ttl",
			slog.String("reasons", strings.Join(l.Reasons(), ",")), slog.String("nodes", l.String()))
	case redisconn.LimitsUnknown:
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
	st        *redis.Store
	candidate *redis.Store // the candidate policy's, on the same client; nil: none
	client    rueidis.Client
}

var errNotConnected = fmt.Errorf("redis: %w: not connected yet", store.ErrUnavailable)

func (l *lazyRedis) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if c := l.c.Load(); c != nil {
		return c.st.Decide(ctx, req, results)
	}
	return store.Outcome{}, errNotConnected
}

// lazyCandidate is the candidate's Redis store once connected.
type lazyCandidate struct{ l *lazyRedis }

func (lc lazyCandidate) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if c := lc.l.c.Load(); c != nil {
		return c.candidate.Decide(ctx, req, results)
	}
	return store.Outcome{}, errNotConnected
}

func (l *lazyRedis) health() error {
	if c := l.c.Load(); c != nil {
		return c.st.Health(context.Background())
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
