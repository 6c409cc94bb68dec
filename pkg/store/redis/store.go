package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/internal/admission"
	"github.com/tokengate/tokengate/pkg/store/redis/internal/breaker"
)

const minInt64 = math.MinInt64

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	opts     Options
	client   rueidis.Client
	cluster  bool
	pid      string // this store's identity in buckets' version fields
	versions versionCache
	breaker  *breaker.Breaker
	metrics  *storeMetrics
	// forgot is the latest cursor of a new bucket that was full and so
	// not stored (RequestTime only; see doc.go).
	forgot              atomic.Int64
	evalOnly            atomic.Bool     // the server has no functions: call by EVALSHA (calls.go)
	admit               *admission.Gate // nil: admits everything
	batch               *batcher        // nil: one call per request (batch.go), or a Cluster
	nodes               *clusterNodes   // a Cluster's nodes (nodes.go), else nil
	deny                *denyCache      // nil: off (deny.go)
	clock               sharedClock
	windowMs, pendingMs string
	toleranceMs         string
	logs                failureLogs
}

var _ store.Store = (*Store)(nil)

// New returns a Store on opts.Client.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("redis: Options.Client is required")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var id [8]byte
	rand.Read(id[:])
	s := &Store{
		opts:        opts,
		client:      opts.Client,
		cluster:     opts.Client.Mode() == rueidis.ClientModeCluster,
		pid:         hex.EncodeToString(id[:]),
		metrics:     newStoreMetrics(opts.Registerer),
		windowMs:    strconv.FormatInt(max(opts.ReplayWindow.Milliseconds(), 1), 10),
		toleranceMs: strconv.FormatInt(max(opts.ClockStepTolerance.Milliseconds(), 1), 10),
		pendingMs:   strconv.FormatInt((time.Second + 4*opts.Timeout).Milliseconds(), 10),
		logs:        newFailureLogs(),
	}
	s.breaker = s.newBreaker("")
	s.admit = admission.New(opts.Admission, opts.Timeout, s.metrics.inFlight.WithLabelValues("light"), s.metrics.inFlight.WithLabelValues("heavy"))
	s.deny = newDenyCache(*opts.DenyCacheBytes, int64(opts.DenyCacheAge))
	if s.cluster {
		s.nodes = newClusterNodes(s, opts.Batch)
	} else {
		s.batch = newBatcher(s, opts.Batch)
	}
	if opts.BatchWith != nil {
		s.batch, s.nodes = opts.BatchWith.batch, opts.BatchWith.nodes
	}
	s.forgot.Store(minInt64)
	return s, nil
}

// Collector is the store's metrics as one prometheus.Collector, for a
// caller that registers them itself rather than through
// Options.Registerer.
func (s *Store) Collector() prometheus.Collector { return s.metrics }

// Prepare readies the store for its first decision: it loads the function
// library, anchors the shared clock (clock.go) and, on a Cluster, reads
// which node serves which slot (nodes.go), so that the first request's
// deadline is not spent on them. On an error each is left to the first
// decision, as without Prepare.
func (s *Store) Prepare(ctx context.Context) error {
	err := s.loadLibrary(ctx)
	if s.nodes != nil {
		err = errors.Join(err, s.nodes.read(ctx))
	}
	if s.opts.RequestTime {
		return err
	}
	return errors.Join(err, s.anchor(ctx))
}

// Cluster reports whether the client talks to a Redis Cluster.
func (s *Store) Cluster() bool { return s.cluster }

// Decide implements store.Store: one call (FCALL, often shared with
// concurrent requests: batch.go) for a request whose buckets share a hash
// slot (always, outside Cluster), a reserve and settle otherwise (see
// doc.go).
func (s *Store) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if err := store.Validate(req, results); err != nil {
		return store.Outcome{}, err
	}
	if len(req.Items) == 0 {
		return store.Outcome{Allowed: true}, nil
	}
	tags := requestTags(req)
	if s.deny != nil && s.deny.answer(req, tags, results) {
		s.metrics.denyHits.Inc()
		return store.Outcome{}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	// Admitted before the breaker is asked, so that a half-open breaker's
	// probe is never shed: it reaches Redis and reports back.
	if err := s.admit.Acquire(cctx, len(req.Items)); err != nil {
		return store.Outcome{}, s.shed(ctx, len(req.Items), err)
	}
	defer s.admit.Release(len(req.Items))
	var g guard
	if !s.allow(tags, &g) {
		s.metrics.errors.WithLabelValues("circuit_open").Inc()
		return store.Outcome{}, fmt.Errorf("redis: %w: circuit open after repeated failures", store.ErrUnavailable)
	}
	out, err := s.decide(cctx, req, results, tags)
	g.report(s.judge(ctx, err, len(req.Items)), err)
	return out, err
}

// requestTags are the hash tags of a request's buckets.
func requestTags(req *store.Request) [][16]byte {
	tags := make([][16]byte, len(req.Items))
	for i := range req.Items {
		tags[i] = tagBytes(req.Items[i].Key)
	}
	return tags
}

func (s *Store) decide(ctx context.Context, req *store.Request, results []store.Result, raw [][16]byte) (store.Outcome, error) {
	at, err := s.instant(ctx, req)
	if err != nil {
		return store.Outcome{}, err
	}
	now := func() string { return strconv.FormatUint(at, 10) }
	if s.cluster && len(raw) > 1 {
		if groups := s.byNode(bySlot(raw), raw); len(groups) > 1 {
			s.metrics.crossSlot.Inc()
			out, err := s.decideCross(ctx, req, results, at, raw, groups)
			if err == nil && out.Allowed && s.deny != nil {
				s.deny.learn(req, raw, true, nil)
			}
			return out, err
		}
	}
	var keys, args []string
	c := s.compactDecide(req, raw, at)
	if c != nil {
		keys = s.bucketKeys(raw)
	} else {
		keys, args = s.decideArgs(req, raw, now())
	}
	var w *queued
	switch b := s.batcherOf(keys[0]); {
	case b != nil:
		w, err = b.do(ctx, keys, args, c)
		if errors.Is(err, errLate) {
			err = s.ambiguous(err, w, req, raw, keys, now())
		}
	case c != nil || s.cluster && multiSlot(keys):
		w = &queued{keys: keys, args: args, compact: c, multi: s.cluster && multiSlot(keys)}
		s.callBatch(ctx, []*queued{w})
		err = w.err
	default:
		w = &queued{}
		w.reply, err = s.call(ctx, keys, args)
	}
	if err != nil {
		return store.Outcome{}, fmt.Errorf("redis: decide %d items: %w", len(req.Items), err)
	}
	var small [8]itemRecord
	items := small[:]
	if len(req.Items) > len(small) {
		items = make([]itemRecord, len(req.Items))
	}
	items = items[:len(req.Items)]
	r, err := s.decodeCall(w, items)
	switch {
	case err != nil:
		return store.Outcome{}, err
	case r.kind == kindPending:
		return s.awaitReplay(ctx, req, results, raw, keys[len(keys)-1])
	case r.kind == kindReplay:
		return s.replay(r.record, results[:len(req.Items)])
	}
	for i := range items {
		results[i] = items[i].res
	}
	if w.reply == nil { // only the lean path answers packed
		s.metrics.lean.Inc()
	} else {
		s.metrics.general.Inc()
	}
	if s.deny != nil {
		s.deny.learn(req, raw, r.allowed, items)
	}
	return store.Outcome{Allowed: r.allowed}, nil
}

// byNode merges slot groups (of the buckets of tags raw) by node when
// every one's node is known and batches: a call may then touch keys of
// several slots of its node (a node call). The first group holds item 0.
func (s *Store) byNode(groups [][]int, raw [][16]byte) [][]int {
	if len(groups) == 1 {
		return groups
	}
	nodes := make([]*node, 0, len(groups))
	var merged [][]int
	for _, g := range groups {
		// The slot again, rather than bySlot's: returned, its slots
		// would leave the stack (two allocations at three buckets).
		n := s.nodes.of(tagSlot(raw[g[0]]))
		if n == nil || n.batch == nil {
			return groups
		}
		if j := slices.Index(nodes, n); j >= 0 {
			merged[j] = append(merged[j], g...)
		} else {
			nodes, merged = append(nodes, n), append(merged, g)
		}
	}
	return merged
}

// batcherOf is the batcher of the calls of key's slot, nil when calls go
// alone.
func (s *Store) batcherOf(key string) *batcher {
	if s.nodes != nil {
		if n := s.nodes.of(keySlot(key)); n != nil {
			return n.batch
		}
		return nil
	}
	return s.batch
}

// decideArgs are the keys and arguments of a request's decide call at
// the script's instant now; raw are its buckets' hash tags.
func (s *Store) decideArgs(req *store.Request, raw [][16]byte, now string) (keys, args []string) {
	keys = s.bucketKeys(raw)
	idMode, fp := idNone, ""
	if req.ID != "" {
		idMode, fp = idLast, fingerprint(req.Items)
		keys = append(keys, s.idKey(raw[0], req.ID, fp))
	}
	args = s.header(make([]string, 0, headerArgs+itemArgs*len(req.Items)), opDecide, now, idMode, len(req.Items), fp, holdName(req))
	for i := range req.Items {
		args = s.item(args, &req.Items[i], req.Now)
	}
	return keys, args
}

// decodeCall decodes a call's reply, packed or not, and raises forgot.
func (s *Store) decodeCall(w *queued, items []itemRecord) (reply, error) {
	if w.reply == nil {
		return decodePacked(w.packed, items)
	}
	return s.decodeReply(w.reply, items)
}

// decodeReply decodes a reply and raises forgot.
func (s *Store) decodeReply(msgs []rueidis.RedisMessage, items []itemRecord) (reply, error) {
	r, err := decodeReply(msgs, items)
	if err == nil && r.forgot != "" {
		u, perr := strconv.ParseUint(r.forgot, 10, 64)
		if perr != nil {
			return r, fmt.Errorf("redis: bad forgotten cursor %q", r.forgot)
		}
		s.raiseForgot(unbias(u))
	}
	return r, err
}

func (s *Store) raiseForgot(v int64) {
	for old := s.forgot.Load(); v > old && !s.forgot.CompareAndSwap(old, v); old = s.forgot.Load() {
	}
}

// replay answers from a request id's record.
func (s *Store) replay(rec string, results []store.Result) (store.Outcome, error) {
	allowed, err := parseRecord(rec, results)
	if err != nil {
		return store.Outcome{}, err
	}
	s.metrics.replays.Inc()
	return store.Outcome{Allowed: allowed, Replayed: true}, nil
}

// awaitReplay waits, within ctx, for the call that holds the request id to
// record its answer, and replays it. Should the claim vanish (that call
// failed), the request is decided again.
func (s *Store) awaitReplay(ctx context.Context, req *store.Request, results []store.Result, raw [][16]byte, idKey string) (store.Outcome, error) {
	s.metrics.idWaits.Inc()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return store.Outcome{}, fmt.Errorf("redis: request id %x still being decided: %w", req.ID, ctx.Err())
		case <-t.C:
		}
		rec, err := s.client.Do(ctx, s.client.B().Hget().Key(idKey).Field(idFieldRecord).Build()).ToString()
		switch {
		case rueidis.IsRedisNil(err):
			return s.decide(ctx, req, results, raw)
		case err != nil:
			return store.Outcome{}, fmt.Errorf("redis: read request id answer: %w", err)
		case rec != idPending:
			// The answer is in: decide again, which replays it (and counts
			// the replay against MaxReplays).
			return s.decide(ctx, req, results, raw)
		}
	}
}
