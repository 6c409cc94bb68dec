package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
)

// Options configure a Store. Zero fields take the defaults in brackets.
type Options struct {
	// Shards is the number of bucket shards, rounded up to a power of two
	// [256].
	Shards int
	// MaxBuckets is the hard cap on stored buckets [1,000,000]. Each shard
	// holds at most MaxBuckets/Shards (rounded up).
	MaxBuckets int
	// EvictionSample is how many buckets a full shard looks at to choose
	// one to evict [8].
	EvictionSample int
	// ReplayWindow is how long a request id is remembered [30s].
	ReplayWindow time.Duration
	// MaxRequestIDs caps the remembered request ids [100,000]; past it the
	// oldest id is forgotten early (counted).
	MaxRequestIDs int
	// Clock times lock waits and drives Run's sweeps [monotonic clock].
	Clock clock.Clock
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Shards, 256)
	def(&o.MaxBuckets, 1_000_000)
	def(&o.EvictionSample, 8)
	def(&o.MaxRequestIDs, 100_000)
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = 30 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.NewMonotonic()
	}
	o.Shards = 1 << bits.Len(uint(o.Shards-1))
	return o
}

// Store is the sharded in-memory store.
type Store struct {
	opts     Options
	shards   []shard
	mask     uint64
	perShard int
	seed     maphash.Seed
	replays  *replays
	// forgot is the latest cursor of any bucket the store dropped or never
	// stored because it was full. A new bucket starts with its cursor no
	// earlier than this, so a request whose clock reading is behind a
	// forgotten bucket's cursor cannot refill that stretch twice: forgetting
	// a full bucket loses nothing at all, not even its cursor.
	forgot atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New(opts Options) *Store {
	opts = opts.withDefaults()
	s := &Store{
		opts:     opts,
		shards:   make([]shard, opts.Shards),
		mask:     uint64(opts.Shards - 1),
		perShard: (opts.MaxBuckets + opts.Shards - 1) / opts.Shards,
		seed:     maphash.MakeSeed(),
		replays:  newReplays(opts.MaxRequestIDs, int64(opts.ReplayWindow)),
	}
	s.forgot.Store(math.MinInt64)
	for i := range s.shards {
		s.shards[i].forgot = &s.forgot
		s.shards[i].idx = make(map[string]int32)
		s.shards[i].rng = maphash.Comparable(s.seed, i) | 1
	}
	return s
}

// work is the in-flight decision for one item.
type work struct {
	shard    uint32
	dupOf    int16           // index of the first item with the same key, or -1
	last     int16           // for a first item: index of the last item with its key
	slot     int32           // the bucket's slot, -1 for a new bucket
	version  *bucket.Version // the version the bucket is decided under
	refilled bucket.State    // brought forward and refilled, nothing charged
	after    bucket.State    // after this item's decision
}

// Decide implements store.Store.
func (s *Store) Decide(_ context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if err := validate(req, results); err != nil {
		return store.Outcome{}, err
	}
	if req.ID == "" {
		return s.decide(req, results), nil
	}
	return s.replays.do(req, results, s.decide), nil
}

func validate(req *store.Request, results []store.Result) error {
	if n := len(req.Items); n > store.MaxItems || len(results) < n {
		return fmt.Errorf("%w: %d items (at most %d, %d results)", store.ErrInvalid, n, store.MaxItems, len(results))
	}
	for i := range req.Items {
		if req.Items[i].Version == nil {
			return fmt.Errorf("%w: item %d (%q) has no version", store.ErrInvalid, i, req.Items[i].Key)
		}
	}
	return nil
}

func (s *Store) decide(req *store.Request, results []store.Result) store.Outcome {
	var small [4]work
	ws := small[:0]
	if len(req.Items) > len(small) {
		ws = make([]work, 0, len(req.Items))
	}
	ws = s.plan(req.Items, ws)
	var order [store.MaxItems]uint32
	locked := lockOrder(ws, order[:0])
	for _, i := range locked {
		s.lock(&s.shards[i])
	}

	allowed := true
	for i := range req.Items {
		w := &ws[i]
		item := &req.Items[i]
		var r bucket.Result
		if w.dupOf < 0 {
			w.version, w.refilled, w.slot = s.shards[w.shard].load(item.Key, item.Version, req.Now)
			w.after = w.refilled
		} else {
			first := &ws[w.dupOf]
			w.version, w.refilled, w.after = first.version, first.refilled, ws[first.last].after
			first.last = int16(i)
		}
		w.after, r = w.version.Params.Decide(w.after, req.Now, item.Cost)
		allowed = allowed && r.Allowed
		results[i].Result = r
	}
	s.write(req, ws, allowed)
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	for i := range req.Items {
		w := &ws[i]
		if !allowed && !results[i].Never {
			// Nothing was charged: report the uncharged balance.
			results[i].Remaining = w.refilled.Tokens
		}
		st := w.after
		if !allowed {
			st = w.refilled
		}
		results[i].ResetAfter = w.version.Params.UntilFull(st, req.Now)
	}
	return store.Outcome{Allowed: allowed}
}

// write stores each bucket's final state: charged when the request is
// allowed, only refilled when not. A new bucket that would be stored full is
// not stored at all: a full bucket is what a missing one means.
func (s *Store) write(req *store.Request, ws []work, allowed bool) {
	for i := range ws {
		w := &ws[i]
		if w.dupOf >= 0 {
			continue
		}
		final := w.refilled
		if allowed {
			final = ws[w.last].after
		}
		sh := &s.shards[w.shard]
		switch {
		case w.slot >= 0:
			sh.slots[w.slot].s, sh.slots[w.slot].v = final, w.version
		case final.Tokens < w.version.Params.Capacity():
			w.slot = sh.insert(req.Items[i].Key, final, w.version,
				commit{shard: w.shard, ws: ws, limit: s.perShard, sample: s.opts.EvictionSample, now: req.Now})
		default:
			raise(&s.forgot, final.At)
		}
	}
}

// plan hashes each key to its shard and links items that share a key.
func (s *Store) plan(items []store.Item, ws []work) []work {
	for i := range items {
		w := work{shard: uint32(maphash.String(s.seed, items[i].Key) & s.mask), dupOf: -1, last: int16(i), slot: -1}
		for j := range i {
			if ws[j].dupOf < 0 && items[j].Key == items[i].Key {
				w.dupOf = int16(j)
				break
			}
		}
		ws = append(ws, w)
	}
	return ws
}

// lockOrder returns the distinct shards of ws in ascending order: every
// request locks in that order, so no two requests can deadlock.
func lockOrder(ws []work, order []uint32) []uint32 {
	for i := range ws {
		order = insertSorted(order, ws[i].shard)
	}
	return order
}

func insertSorted(order []uint32, v uint32) []uint32 {
	i := len(order)
	for i > 0 && order[i-1] > v {
		i--
	}
	if i > 0 && order[i-1] == v {
		return order
	}
	order = append(order, 0)
	copy(order[i+1:], order[i:])
	order[i] = v
	return order
}

// lock takes sh's lock, timing the wait when it is contended: the common
// uncontended case costs one TryLock and no clock read.
func (s *Store) lock(sh *shard) {
	if sh.mu.TryLock() {
		return
	}
	start := s.opts.Clock.Now()
	sh.mu.Lock()
	sh.contended++
	sh.waitNs += uint64(max(s.opts.Clock.Now()-start, 0))
}
