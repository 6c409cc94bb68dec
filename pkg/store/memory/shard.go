package memory

import (
	"sync"
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// A shard is a lock and a table of buckets (table.go): key hash, state and
// version inline, so a decision costs one probe, and on a large store every
// extra pointer to follow is a cache and TLB miss, the largest cost there is.
type shard struct {
	mu      sync.Mutex
	buckets table
	// versions are the parameter versions the shard's buckets refer to:
	// slot.ver n is versions[n-1]. Keeping them out of the slots keeps the
	// tables free of pointers; sweep drops the ones no bucket uses.
	versions []*bucket.Version
	refs     map[*bucket.Version]uint32
	rng      uint64 // xorshift state for eviction sampling
	// forgot is the store-wide high-water mark of the cursors of buckets
	// that were dropped or never stored (see Store.forgot).
	forgot *atomic.Int64
	// holds are the reservations of the shard's buckets (reserve.go).
	holds holds

	// Counters, guarded by mu.
	contended uint64 // lock acquisitions that had to wait
	waitNs    uint64 // total wait of those
	evicted   [numReasons]uint64

	_ [64]byte // keep neighbouring shards' locks off this cache line
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
	// Expired: its version's Horizon has passed (a calendar budget's
	// period ended: the next period is another bucket).
	Expired
	numReasons
)

func (r Reason) String() string { return [...]string{"full", "removed", "idle", "expired"}[r] }

// load returns the bucket at h brought forward to v (or to its own version
// when that is newer: a bucket never moves back) and refilled to now, and
// whether it was stored; a new bucket is full, with its cursor no earlier
// than any forgotten bucket's. The bucket's expired reservations are
// returned first (reserve.go), once it is brought forward.
func (sh *shard) load(h keyHash, v *bucket.Version, now int64) (*bucket.Version, bucket.State, *slot) {
	sl := sh.buckets.find(h)
	if sl == nil {
		return v, v.Params.Full(max(now, sh.forgot.Load())), nil
	}
	from := sh.version(sl)
	if from.ID > v.ID {
		v = from
	}
	st := sh.holds.returnExpired(h, v.Params, v.Bring(sl.s, from), now)
	return v, v.Params.Refill(st, now), sl
}

// version is the parameter version of a stored bucket.
func (sh *shard) version(sl *slot) *bucket.Version { return sh.versions[sl.ver-1] }

// ref returns the shard's reference to v, adding v when it is new.
func (sh *shard) ref(v *bucket.Version) uint32 {
	if r, ok := sh.refs[v]; ok {
		return r
	}
	if sh.refs == nil {
		sh.refs = map[*bucket.Version]uint32{}
	}
	sh.versions = append(sh.versions, v)
	r := uint32(len(sh.versions))
	sh.refs[v] = r
	return r
}

// put stores a bucket's final state. A new bucket that is full is not
// stored at all (a full bucket is what a missing one means); only its cursor
// is remembered, in forgot. A new bucket in a shard at its cap first evicts
// another (never one of the request's own).
// The slot of a stored bucket (from load) is only valid until the shard's
// table next changes: put writes every stored bucket of a request before
// inserting any new one.
func (sh *shard) put(h keyHash, stored *slot, st bucket.State, v *bucket.Version, c commit) {
	switch {
	case stored != nil:
		stored.s, stored.ver = st, sh.ref(v)
	case st.Tokens == v.Params.Capacity() && !c.owes:
		raise(sh.forgot, st.At)
	default:
		if sh.buckets.n >= c.limit {
			sh.evictOne(c)
		}
		sh.buckets.insert(h, st, sh.ref(v))
	}
}

func (sh *shard) remove(i uint64, why Reason) {
	raise(sh.forgot, sh.buckets.slots[i].s.At)
	sh.holds.drop(sh.buckets.slots[i].h)
	sh.buckets.remove(i)
	sh.evicted[why]++
}

// evictOne drops one of c.sample buckets that follow a random slot: a
// removed or full one at no cost if there is one, else the least recently
// refilled. The request's own buckets are never chosen.
func (sh *shard) evictOne(c commit) {
	slots := sh.buckets.slots
	m := sh.buckets.mask()
	victim, seen := -1, 0
	for i, probes := sh.next()&m, 0; seen < c.sample && probes < len(slots); i, probes = (i+1)&m, probes+1 {
		sl := &slots[i]
		if sl.ver == 0 || c.busy(sl.h) {
			continue
		}
		if why, ok := sh.droppable(sl, c.now); ok {
			sh.remove(i, why)
			return
		}
		if victim < 0 || sl.s.At < slots[victim].s.At {
			victim = int(i)
		}
		seen++
	}
	if victim >= 0 {
		sh.remove(uint64(victim), Idle)
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

// droppable reports whether sl carries no information at now: its rule is
// gone, its version's horizon has passed (its reservations go with it),
// or it is full under the rule's current version and owes no reservation
// back.
func (sh *shard) droppable(sl *slot, now int64) (Reason, bool) {
	v := sh.version(sl)
	lin := v.Lineage()
	if lin.Removed() {
		return Removed, true
	}
	if h := v.Horizon; h != nil && now >= h.End(sl.s.At) {
		return Expired, true
	}
	cur := lin.Current()
	if cur == nil || cur.ID < v.ID {
		cur = v
	}
	st := cur.Params.Refill(cur.Bring(sl.s, v), now)
	return Full, st.Tokens == cur.Params.Capacity() && !sh.holds.of(sl.h)
}

// sweep drops every droppable bucket and returns how many it dropped. After
// a removal it looks at the same slot again: the removal may have shifted
// another bucket into it. Then it forgets the versions no bucket uses.
func (sh *shard) sweep(now int64) int {
	n := 0
	used := make([]bool, len(sh.versions)+1)
	for i := 0; i < len(sh.buckets.slots); {
		if sl := &sh.buckets.slots[i]; sl.ver != 0 {
			if why, ok := sh.droppable(sl, now); ok {
				sh.remove(uint64(i), why)
				n++
				continue
			}
			used[sl.ver] = true
		}
		i++
	}
	sh.forgetVersions(used)
	return n
}

// forgetVersions renumbers the versions that used marks and drops the rest.
func (sh *shard) forgetVersions(used []bool) {
	renumber := make([]uint32, len(used))
	var kept []*bucket.Version
	refs := map[*bucket.Version]uint32{}
	for r, v := range sh.versions {
		if used[r+1] {
			kept = append(kept, v)
			renumber[r+1] = uint32(len(kept))
			refs[v] = uint32(len(kept))
		}
	}
	for i := range sh.buckets.slots {
		sl := &sh.buckets.slots[i]
		sl.ver = renumber[sl.ver]
	}
	sh.versions, sh.refs = kept, refs
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
	// owes: the bucket put is reserved by the request (allowed), so it
	// is stored even when full: it owes the reservation back.
	owes bool
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
