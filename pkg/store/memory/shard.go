package memory

import (
	"sync"
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// A shard keeps its buckets in a slab of slots indexed by a map from key
// hash to slot: eviction samples random slots in O(1) and sweeps walk the
// slab in order.
type shard struct {
	mu    sync.Mutex
	idx   map[keyHash]int32
	slots []slot
	free  []int32
	rng   uint64 // xorshift state for eviction sampling
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
	h keyHash
	s bucket.State
	v *bucket.Version // nil marks a free slot
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

// load returns the bucket at key brought forward to v (or to its own
// version when that is newer: a bucket never moves back) and refilled to
// now, with its slot; slot -1 means a new, full bucket, whose cursor starts
// no earlier than any forgotten bucket's.
func (sh *shard) load(h keyHash, v *bucket.Version, now int64) (*bucket.Version, bucket.State, int32) {
	i, ok := sh.idx[h]
	if !ok {
		return v, v.Params.Full(max(now, sh.forgot.Load())), -1
	}
	sl := &sh.slots[i]
	if sl.v.ID > v.ID {
		v = sl.v
	}
	return v, v.Params.Refill(v.Bring(sl.s, sl.v), now), i
}

// put stores a bucket's final state in slot i, or for a new bucket (i < 0)
// in a new slot, and returns the slot. A new bucket that is full is not
// stored at all (a full bucket is what a missing one means); only its cursor
// is remembered, in forgot.
func (sh *shard) put(h keyHash, i int32, st bucket.State, v *bucket.Version, c commit) int32 {
	switch {
	case i >= 0:
		sh.slots[i].s, sh.slots[i].v = st, v
	case st.Tokens < v.Params.Capacity():
		i = sh.insert(h, st, v, c)
	default:
		raise(sh.forgot, st.At)
	}
	return i
}

// insert stores a new bucket, evicting one first when the shard is at its
// cap. The request's own buckets are never evicted.
func (sh *shard) insert(h keyHash, st bucket.State, v *bucket.Version, c commit) int32 {
	if len(sh.idx) >= c.limit {
		sh.evictOne(c)
	}
	var i int32
	if n := len(sh.free); n > 0 {
		i = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		i = int32(len(sh.slots))
		sh.slots = append(sh.slots, slot{})
	}
	sh.slots[i] = slot{h: h, s: st, v: v}
	sh.idx[h] = i
	return i
}

func (sh *shard) remove(i int32, why Reason) {
	raise(sh.forgot, sh.slots[i].s.At)
	delete(sh.idx, sh.slots[i].h)
	sh.slots[i] = slot{}
	sh.free = append(sh.free, i)
	sh.evicted[why]++
}

// evictOne drops one of c.sample random buckets: a removed or full one at no
// cost if there is one, else the least recently refilled.
func (sh *shard) evictOne(c commit) {
	victim := int32(-1)
	for range c.sample {
		i := int32(sh.next() % uint64(len(sh.slots)))
		if sh.slots[i].v == nil || c.busy(i) {
			continue
		}
		if why, ok := sh.droppable(i, c.now); ok {
			sh.remove(i, why)
			return
		}
		if victim < 0 || sh.slots[i].s.At < sh.slots[victim].s.At {
			victim = i
		}
	}
	for i := int32(0); victim < 0 && int(i) < len(sh.slots); i++ {
		if sh.slots[i].v != nil && !c.busy(i) {
			victim = i
		}
	}
	if victim >= 0 {
		sh.remove(victim, Idle)
	}
}

// droppable reports whether slot i carries no information at now: its rule
// is gone, or it is full under the rule's current version.
func (sh *shard) droppable(i int32, now int64) (Reason, bool) {
	sl := &sh.slots[i]
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
	for i := range sh.slots {
		if sh.slots[i].v == nil {
			continue
		}
		if why, ok := sh.droppable(int32(i), now); ok {
			sh.remove(int32(i), why)
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

// next steps the shard's xorshift64 generator (guarded by mu).
func (sh *shard) next() uint64 {
	x := sh.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rng = x
	return x
}

// commit is what insert needs to know about the request being written.
type commit struct {
	shard  uint32
	ws     []work
	limit  int
	sample int
	now    int64
}

// busy reports whether slot i of c's shard holds a bucket of this request.
func (c commit) busy(i int32) bool {
	for j := range c.ws {
		if c.ws[j].shard == c.shard && c.ws[j].slot == i {
			return true
		}
	}
	return false
}
