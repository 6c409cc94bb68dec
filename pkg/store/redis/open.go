package redis

// Opening: a store that serves before Redis answers. A replica started
// during an outage must recover when Redis returns, without a restart; so
// Open dials once, and when Redis does not answer returns a store that
// fails with store.ErrUnavailable and connects in the background, every
// second. Only settings wrong in themselves (redisconn.Config.Check: a bad
// URL, a CA file that does not read) stop Open: what Redis or its network
// can fix (down, a name that does not resolve yet, a password or TLS
// setting it refuses) is retried. Until Redis has answered once (a dial
// that completed: the address resolved, TLS and the credentials were
// accepted), Ready says why not, so that a replica with a misspelt
// address is not ready, rather than ready and answering on_store_error
// for ever; after that, a lost Redis is an outage, which on_store_error
// answers. Once connected, it checks Redis's memory settings once and
// watches Redis (Store.Watch) until it is closed.
//
// Serving and closing are ordered by one lock: a connect that completes
// after Close closes its own client and serves nothing, and Close closes
// the client of a store it stopped serving. So every client is closed
// exactly once, and no store serves after Close.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// OpenOptions say how Open reaches Redis and what it builds there.
type OpenOptions struct {
	// Conn says how to reach Redis (redisconn.Dial).
	Conn redisconn.Config
	// Store are the options of the store; Open sets its Client (leave
	// it nil), and closes it on Close.
	Store Options
	// Candidate builds a second store on the same client, for a
	// candidate policy (Lazy.Candidate): its keys in a key space of their
	// own under the live one's ("tokengate:candidate:"), apart from every
	// live key ("tokengate:{...}", "tokengate:clock"); no metrics (they
	// would be the live store's names twice); its calls join the live
	// store's batches; its log lines say policy=candidate.
	Candidate bool
	// WatchEvery is how often the store pings Redis once connected
	// (Store.Watch) [1s].
	WatchEvery time.Duration
	// ConnectedAttrs are more attributes of the "redis store connected"
	// line (cmd/tokengate: the share of on_store_error: local).
	ConnectedAttrs []slog.Attr
}

// Lazy is the store Open returns: the Redis store once connected, and
// until then (and after Close) one whose every call fails with an error
// wrapping store.ErrUnavailable. It is safe for concurrent use.
type Lazy struct {
	o   OpenOptions // Store with its defaults
	log *slog.Logger
	// dial is redisconn.Dial (tests count the clients it makes); ctx is
	// the Lazy's, which Close ends.
	dial func(ctx context.Context, cfg redisconn.Config) (rueidis.Client, error)

	c      atomic.Pointer[connected] // nil: not connected, or closed
	closed atomic.Bool
	// answered is set once Redis has answered (a connect completed);
	// until then failed holds the latest connect's error, for Ready.
	answered atomic.Bool
	failed   atomic.Pointer[error]

	mu   sync.Mutex      // orders serve and Close
	ctx  context.Context // ends when Close is called or Open's ctx ends
	stop context.CancelFunc
	bg   sync.WaitGroup // the connect loop and the watch
}

// connected is what a successful connect built on one client.
type connected struct {
	st        *Store
	candidate *Store // nil: none
	client    rueidis.Client
}

var (
	errNotConnected = fmt.Errorf("redis: %w: not connected yet", store.ErrUnavailable)
	errClosed       = fmt.Errorf("redis: %w: store closed", store.ErrUnavailable)
)

var _ store.Store = (*Lazy)(nil)

// Open returns the Redis store that o describes, connected when Redis
// answers. An error is o's: options or settings wrong in themselves
// (redisconn.Config.Check, an ErrConfig naming the setting). Redis not
// answering is no error, whatever the reason (down, unreachable, or
// refusing the credentials or TLS settings: Ready says which): the store
// connects in the background until ctx ends or it is closed. Close it.
func Open(ctx context.Context, o OpenOptions) (*Lazy, error) {
	return open(ctx, o, func(_ context.Context, cfg redisconn.Config) (rueidis.Client, error) { return redisconn.Dial(cfg) }, time.Second)
}

// open is Open with its dial and the interval of its connect loop.
func open(ctx context.Context, o OpenOptions, dial func(context.Context, redisconn.Config) (rueidis.Client, error), retry time.Duration) (*Lazy, error) {
	if o.Store.Client != nil {
		return nil, errors.New("redis: OpenOptions.Store.Client is Open's to set")
	}
	if err := o.Conn.Check(); err != nil {
		return nil, err
	}
	var err error
	if o.Store, err = o.Store.withDefaults(); err != nil {
		return nil, err
	}
	l := &Lazy{o: o, log: o.Store.Logger, dial: dial}
	l.ctx, l.stop = context.WithCancel(ctx)
	c, err := l.connect()
	switch {
	case err != nil:
		l.notAnswered(err)
		msg := "redis unreachable at start: not ready until it answers; connecting in the background"
		if errors.Is(err, redisconn.ErrConfig) {
			msg = "redis refuses tokengate's settings: not ready until it answers; connecting in the background"
		}
		l.log.Error(msg, slog.String("error", err.Error()))
		l.bg.Go(func() { l.connectLoop(retry) })
	case !l.serve(c):
		c.client.Close() // ctx ended meanwhile
	}
	return l, nil
}

// notAnswered records why the latest connect failed, for Ready.
func (l *Lazy) notAnswered(err error) { l.failed.Store(&err) }

// Ready reports why Redis has not answered since Open, nil once it has:
// then a lost Redis is the store failing (Health), no reason to be unready.
func (l *Lazy) Ready() error {
	switch {
	case l.answered.Load():
		return nil
	case l.closed.Load():
		return errClosed
	}
	if err := l.failed.Load(); err != nil {
		return fmt.Errorf("redis has not answered since the start: %w", *err)
	}
	return errNotConnected
}

// connect dials and builds the stores on the client, and readies them
// (Store.Prepare) within the dial timeout; a failure to ready them is left
// to their first decisions.
func (l *Lazy) connect() (*connected, error) {
	client, err := l.dial(l.ctx, l.o.Conn)
	if err != nil {
		return nil, err
	}
	c := &connected{client: client}
	o := l.o.Store
	o.Client = client
	if c.st, err = New(o); err == nil && l.o.Candidate {
		o.KeyPrefix += "candidate:"
		o.Registerer = nil
		o.BatchWith = c.st
		o.Logger = o.Logger.With(slog.String("policy", "candidate"))
		c.candidate, err = New(o)
	}
	if err != nil {
		client.Close()
		return nil, err
	}
	for _, st := range []*Store{c.st, c.candidate} {
		if st != nil {
			l.prepare(st)
		}
	}
	return c, nil
}

func (l *Lazy) prepare(st *Store) {
	ctx, cancel := context.WithTimeout(l.ctx, dialTimeout(l.o.Conn))
	defer cancel()
	if err := st.Prepare(ctx); err != nil {
		l.log.Debug("redis: not prepared at start; the first decision will", slog.String("error", err.Error()))
	}
}

// dialTimeout is cfg's DialTimeout, or its default.
func dialTimeout(cfg redisconn.Config) time.Duration {
	if cfg.DialTimeout > 0 {
		return cfg.DialTimeout
	}
	return redisconn.DefaultDialTimeout
}

// connectLoop connects every retry until it connects, or l.ctx ends.
func (l *Lazy) connectLoop(retry time.Duration) {
	t := time.NewTicker(retry)
	defer t.Stop()
	for tries := 1; ; tries++ {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		c, err := l.connect()
		if err == nil {
			if !l.serve(c) {
				c.client.Close() // closed meanwhile: do not leak the client
			}
			return
		}
		l.notAnswered(err)
		if tries%30 == 0 {
			l.log.Warn("redis still not answering: not ready", slog.Int("tries", tries), slog.String("error", err.Error()))
		}
	}
}

// serve serves from c and watches it, unless l is closed (or its ctx
// ended): then it reports false, and c's client is the caller's to close.
func (l *Lazy) serve(c *connected) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() || l.ctx.Err() != nil {
		return false
	}
	l.c.Store(c)
	l.answered.Store(true)
	// Logged once the store serves, so that whoever sees the line finds
	// the store in use.
	l.log.LogAttrs(l.ctx, slog.LevelInfo, "redis store connected", append([]slog.Attr{
		slog.String("mode", string(c.client.Mode())), slog.Bool("cluster", c.st.Cluster()),
		slog.Duration("timeout", l.o.Store.Timeout)}, l.o.ConnectedAttrs...)...)
	// The check of Redis's memory settings runs with the watch, once the
	// store serves, so that a slow CONFIG GET delays neither.
	l.bg.Go(func() {
		checkLimits(l.ctx, c.st, l.log)
		c.st.Watch(l.ctx, l.o.WatchEvery)
	})
	return true
}

// Decide implements store.Store.
func (l *Lazy) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if c := l.c.Load(); c != nil {
		return c.st.Decide(ctx, req, results)
	}
	return store.Outcome{}, l.unavailable()
}

// Candidate is the candidate policy's store (OpenOptions.Candidate), nil
// without one.
func (l *Lazy) Candidate() store.Store {
	if !l.o.Candidate {
		return nil
	}
	return lazyCandidate{l}
}

// lazyCandidate is the candidate's store once connected.
type lazyCandidate struct{ l *Lazy }

func (lc lazyCandidate) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if c := lc.l.c.Load(); c != nil {
		return c.candidate.Decide(ctx, req, results)
	}
	return store.Outcome{}, lc.l.unavailable()
}

// Health is Store.Health once connected.
func (l *Lazy) Health(ctx context.Context) error {
	if c := l.c.Load(); c != nil {
		return c.st.Health(ctx)
	}
	return l.unavailable()
}

func (l *Lazy) unavailable() error {
	if l.closed.Load() {
		return errClosed
	}
	return errNotConnected
}

// Close stops serving, ends the connect loop and the watch, waits for
// them, and closes the client. A connect under way when it is called
// closes its own client. Close is idempotent.
func (l *Lazy) Close() {
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return
	}
	c := l.c.Swap(nil)
	l.mu.Unlock()
	// The watch ends before the client closes, so that a ping failing on
	// the closed client is not logged as Redis lost.
	l.stop()
	l.bg.Wait()
	if c != nil {
		c.client.Close()
	}
}

// checkLimits says, once per store (at start, or when a background
// connect succeeds), whether Redis bounds tokengate's keys safely
// (Store.CheckLimits; README's "Redis store" says what to set), and takes
// the first sample of tokengate_redis_keys. Unsafe settings are a
// warning, not a refusal: they cost only under a flood of new keys, and
// an operator may have reasons (a bounded key space) to keep them.
func checkLimits(ctx context.Context, st *Store, log *slog.Logger) {
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
