package memory

import (
	"sync"
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// A shard maps key hashes to buckets, state and version inline in the map,
// so a decision costs one map probe: on a large store every extra pointer
// to follow is a cache and TLB miss, the largest cost there is.
type shard struct {
	mu      sync.Mutex
	buckets map[keyHash]slot
	// forgot is the store-wide high-water mark of the cursors of buckets
	// that were dropped or never stored (see Store.forgot).
	forgot *atomic.Int64

	// Counters, guarded by mu.
	contended uint64 // lock acquisitions that had to wait
	waitNs    uint64 // total wait of those
	evicted   [numReasons]uint64

	_ [64]byte // keep neighbouring shards' locks off this cache line
}

type slot struct {
	s bucket.State
	v *bucket.Version
}

// Reason says why a bucket left the store.
type Reason int

const (
	// Full: the bucket was full, so dropping it lost nothing.
	Full Reason = iota
	// Removed: its rule left the policy.
	Removed
	// Idle: the shard was at its cap and this was the least recently used
	// of the sampled buckets; its owner gets a fresh, full bucket next time.
	Idle
	numReasons
)

func (r Reason) String() string { return [...]string{"full", "removed", "idle"}[r] }

// load returns the bucket at h brought forward to v (or to its own version
// when that is newer: a bucket never moves back) and refilled to now, and
// whether it was stored; a new bucket is full, with its cursor no earlier
// than any forgotten bucket's.
func (sh *shard) load(h keyHash, v *bucket.Version, now int64) (*bucket.Version, bucket.State, bool) {
	sl, ok := sh.buckets[h]
	if !ok {
		return v, v.Params.Full(max(now, sh.forgot.Load())), false
	}
	if sl.v.ID > v.ID {
		v = sl.v
	}
	return v, v.Params.Refill(v.Bring(sl.s, sl.v), now), true
}

// put stores a bucket's final state. A new bucket that is full is not
// stored at all (a full bucket is what a missing one means); only its cursor
// is remembered, in forgot. A new bucket in a shard at its cap first evicts
// another (never one of the request's own).
func (sh *shard) put(h keyHash, stored bool, st bucket.State, v *bucket.Version, c commit) {
	switch {
	case stored:
	case st.Tokens == v.Params.Capacity():
		raise(sh.forgot, st.At)
		return
	case len(sh.buckets) >= c.limit:
		sh.evictOne(c)
	}
	sh.buckets[h] = slot{st, v}
}

func (sh *shard) remove(h keyHash, sl slot, why Reason) {
	raise(sh.forgot, sl.s.At)
	delete(sh.buckets, h)
	sh.evicted[why]++
}

// evictOne drops one of c.sample buckets (map iteration starts at a random
// place): a removed or full one at no cost if there is one, else the least
// recently refilled.
func (sh *shard) evictOne(c commit) {
	var victim keyHash
	var oldest slot
	seen := 0
	for h, sl := range sh.buckets {
		if c.busy(h) {
			continue
		}
		if why, ok := droppable(sl, c.now); ok {
			sh.remove(h, sl, why)
			return
		}
		if seen == 0 || sl.s.At < oldest.s.At {
			victim, oldest = h, sl
		}
		if seen++; seen == c.sample {
			break
		}
	}
	if seen > 0 {
		sh.remove(victim, oldest, Idle)
	}
}

// droppable reports whether sl carries no information at now: its rule is
// gone, or it is full under the rule's current version.
func droppable(sl slot, now int64) (Reason, bool) {
	lin := sl.v.Lineage()
	if lin.Removed() {
		return Removed, true
	}
	cur := lin.Current()
	if cur == nil || cur.ID < sl.v.ID {
		cur = sl.v
	}
	st := cur.Params.Refill(cur.Bring(sl.s, sl.v), now)
	return Full, st.Tokens == cur.Params.Capacity()
}

// sweep drops every droppable bucket and returns how many it dropped.
func (sh *shard) sweep(now int64) int {
	n := 0
	for h, sl := range sh.buckets {
		if why, ok := droppable(sl, now); ok {
			sh.remove(h, sl, why)
			n++
		}
	}
	return n
}

// raise sets m to max(m, v).
func raise(m *atomic.Int64, v int64) {
	for old := m.Load(); v > old && !m.CompareAndSwap(old, v); old = m.Load() {
	}
}

// commit is what put needs to know about the request being written.
type commit struct {
	ws     []work
	limit  int
	sample int
	now    int64
}

// busy reports whether h is a bucket of this request.
func (c commit) busy(h keyHash) bool {
	for j := range c.ws {
		if c.ws[j].h == h {
			return true
		}
	}
	return false
}
