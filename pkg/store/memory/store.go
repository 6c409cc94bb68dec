package memory

import (
	"context"
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
	// and down to at most MaxBuckets [256].
	Shards int
	// MaxBuckets is the hard cap on stored buckets [1,000,000]. Each shard
	// holds at most MaxBuckets/Shards, so the store holds at most
	// MaxBuckets (plus, in a shard at its cap, the other buckets of one
	// request, which are never evicted for each other).
	MaxBuckets int
	// EvictionSample is how many buckets a full shard looks at to choose
	// one to evict [8].
	EvictionSample int
	// ReplayWindow is how long a request id is remembered [30s].
	ReplayWindow time.Duration
	// MaxRequestIDs caps the remembered request ids [100,000]; past it the
	// oldest id is forgotten early (counted).
	MaxRequestIDs int
	// MaxReservations caps the reservations held (store.Item.Reserve)
	// [100,000]; past it a check holds nothing (counted: reserve.go).
	MaxReservations int
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
	def(&o.MaxReservations, 100_000)
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = 30 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.NewMonotonic()
	}
	o.Shards = 1 << bits.Len(uint(o.Shards-1))
	for o.Shards > o.MaxBuckets {
		o.Shards /= 2
	}
	return o
}

// Store is the sharded in-memory store.
type Store struct {
	opts     Options
	shards   []shard
	mask     uint64
	perShard int
	seeds    [2]maphash.Seed
	replays  *replays
	// forgot is the latest cursor of any bucket the store dropped or never
	// stored because it was full. A new bucket starts with its cursor no
	// earlier than this, so a request whose clock reading is behind a
	// forgotten bucket's cursor cannot refill that stretch twice: forgetting
	// a full bucket loses nothing at all, not even its cursor.
	forgot atomic.Int64
	// holdCount is the number of reservations held, in every shard;
	// unheld counts the checks that found no room for theirs.
	holdCount atomic.Int64
	unheld    atomic.Uint64
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New(opts Options) *Store {
	opts = opts.withDefaults()
	s := &Store{
		opts:     opts,
		shards:   make([]shard, opts.Shards),
		mask:     uint64(opts.Shards - 1),
		perShard: opts.MaxBuckets / opts.Shards,
		seeds:    [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		replays:  newReplays(opts.MaxRequestIDs, int64(opts.ReplayWindow)),
	}
	s.forgot.Store(math.MinInt64)
	for i := range s.shards {
		s.shards[i].forgot = &s.forgot
		s.shards[i].rng = maphash.Comparable(s.seeds[0], i) | 1
		s.shards[i].holds.count = &s.holdCount
	}
	return s
}

// work is the in-flight decision for one item.
type work struct {
	h       keyHash
	shard   uint32
	dupOf   int16           // index of the first item with the same key, or -1
	stored  *slot           // the bucket's slot, nil for a new bucket
	version *bucket.Version // the version the bucket is decided under
	// For the first item of a key: base is the bucket brought forward,
	// refilled and charged the request's reports (what is written when a
	// gate refuses), cur is base with the gates decided so far.
	base, cur bucket.State
	after     bucket.State // after this item's decision
	reserved  bool         // the item took a reservation (reserve.go)
}

// first is the work of the first item with item i's key.
func first(ws []work, i int) *work {
	if d := ws[i].dupOf; d >= 0 {
		return &ws[d]
	}
	return &ws[i]
}

// Decide implements store.Store.
func (s *Store) Decide(_ context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	if err := store.Validate(req, results); err != nil {
		return store.Outcome{}, err
	}
	if req.ID == "" {
		return s.decide(req, results), nil
	}
	return s.replays.do(req, results, s.decide), nil
}

func (s *Store) decide(req *store.Request, results []store.Result) store.Outcome {
	if len(req.Items) == 1 && req.Items[0].Reserve == 0 {
		return s.decideOne(req, results)
	}
	var id [16]byte
	if req.ID != "" {
		id = idKey(req.ID)
	}
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

	// Reports first (store.Store), whatever the gates say.
	for i := range req.Items {
		w := &ws[i]
		item := &req.Items[i]
		if w.dupOf < 0 {
			w.version, w.base, w.stored = s.shards[w.shard].load(w.h, item.Version, req.Now)
			w.cur = w.base
		}
		f := first(ws, i)
		w.version = f.version
		if item.Charge == store.Report {
			cost := item.Cost
			if req.ID != "" {
				cost -= s.shards[w.shard].holds.settle(holdKey{id, w.h})
			}
			f.base, results[i].Result = f.version.Params.Report(f.base, req.Now, cost)
			f.cur, w.after = f.base, f.base
		}
	}
	allowed, reserving := true, false
	for i := range req.Items {
		item := &req.Items[i]
		if item.Charge == store.Report {
			continue
		}
		f := first(ws, i)
		var r bucket.Result
		if item.Reserve > 0 {
			f.cur, r = s.reserve(ws, i, id, item, f.version.Params, f.cur, req.Now)
			reserving = reserving || ws[i].reserved
		} else {
			f.cur, r = item.Charge.Decide(f.version.Params, f.cur, req.Now, item.Cost)
		}
		ws[i].after = f.cur
		allowed = allowed && r.Allowed
		results[i].Result = r
	}
	s.write(ws, allowed, req.Now)
	if reserving {
		s.record(ws, req, id, allowed)
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	for i := range req.Items {
		w := &ws[i]
		st := w.after
		if !allowed && req.Items[i].Charge != store.Report {
			// No gate was charged: report the balance without them.
			st = first(ws, i).base
			if !results[i].Never {
				results[i].Remaining, results[i].Debt = st.Remaining(), st.Debt()
			}
		}
		results[i].ResetAfter = w.version.Params.UntilFull(st, req.Now)
	}
	return store.Outcome{Allowed: allowed}
}

// write stores each bucket's final state: charged when the request is
// allowed, only refilled and reported when not. Stored buckets are written
// first, through the slots load found; only then are new ones inserted,
// since an insert may move the slots of its shard.
func (s *Store) write(ws []work, allowed bool, now int64) {
	for _, inserting := range [2]bool{false, true} {
		for i := range ws {
			w := &ws[i]
			if w.dupOf >= 0 || (w.stored == nil) != inserting {
				continue
			}
			final, c := w.base, s.commit(ws, now)
			if allowed {
				final, c.owes = w.cur, reserves(ws, w.h)
			}
			s.shards[w.shard].put(w.h, w.stored, final, w.version, c)
		}
	}
}

func (s *Store) commit(ws []work, now int64) commit {
	return commit{ws: ws, limit: s.perShard, sample: s.opts.EvictionSample, now: now}
}

// decideOne is decide for the most common request, a single bucket that
// it does not reserve, with none of the bookkeeping that several buckets
// need.
func (s *Store) decideOne(req *store.Request, results []store.Result) store.Outcome {
	it := &req.Items[0]
	w := work{h: s.hash(it.Key), dupOf: -1}
	w.shard = uint32(w.h.a & s.mask)
	sh := &s.shards[w.shard]
	s.lock(sh)
	w.version, w.base, w.stored = sh.load(w.h, it.Version, req.Now)
	report := it.Charge == store.Report
	cost := it.Cost
	if report && req.ID != "" {
		cost -= sh.holds.settle(holdKey{idKey(req.ID), w.h})
	}
	final, r := it.Charge.Decide(w.version.Params, w.base, req.Now, cost)
	if !r.Allowed && !report {
		final = w.base
	}
	sh.put(w.h, w.stored, final, w.version, s.commit(nil, req.Now))
	sh.mu.Unlock()
	results[0] = store.Result{Result: r, ResetAfter: w.version.Params.UntilFull(final, req.Now)}
	// A report is no gate: alone, nothing refuses the request.
	return store.Outcome{Allowed: r.Allowed || report}
}

// keyHash identifies a bucket: a 128-bit hash of its key under two random
// seeds. Two keys collide with probability 2^-128, and the seeds are never
// shown, so no one can pick keys that collide; in exchange the store keeps
// no key strings, which halves the memory per bucket and saves a cache miss
// per decision.
type keyHash struct{ a, b uint64 }

func (s *Store) hash(key string) keyHash {
	return keyHash{maphash.String(s.seeds[0], key), maphash.String(s.seeds[1], key)}
}

// plan hashes each key to its shard and links items that share a key.
func (s *Store) plan(items []store.Item, ws []work) []work {
	for i := range items {
		h := s.hash(items[i].Key)
		w := work{h: h, shard: uint32(h.a & s.mask), dupOf: -1}
		for j := range i {
			if ws[j].dupOf < 0 && ws[j].h == h {
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
