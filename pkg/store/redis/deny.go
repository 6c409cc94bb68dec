package redis

import (
	"encoding/binary"
	"sync"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// The deny cache answers over-limit requests without Redis.
//
// When Redis rejects a request, the script answers, for each bucket it
// decided in plain numbers under the item's own version, a snapshot of
// its uncharged balance: tokens, fraction and cursor. The store keeps
// those snapshots, mapped onto this replica's clock at the instant it sent
// the request (before Redis decided, so a snapshot never holds fewer
// tokens than Redis saw then). A later request whose every bucket has a
// fresh snapshot of the same version and revision is decided against the
// snapshots, refilled to its own instant with pkg/bucket's exact
// arithmetic: if one of them cannot cover its cost, the request is
// rejected here, with the answer Redis would give were no other request
// to touch those buckets meanwhile; otherwise it goes to Redis.
//
// What it can get wrong, and the bound: other requests only ever take
// tokens, so a rejection here is one Redis would make too, except after
// tokens were added behind this replica's back: a refund or a policy
// change sent through another replica, or the bucket lost in Redis
// (restart, flush, eviction). Then this replica may reject a request
// Redis would allow, for at most DenyCacheAge (1s by default) after the
// rejection it learned from, and never past the instant the rejected cost
// would have become affordable anyway. Its own refunds and version changes
// invalidate at once (an allowed request drops its buckets' snapshots, so
// does any answer Redis gives without one; a new version or revision never
// matches an old one). A post-paid rule's checks are answered so too (a
// bucket in debt refuses them until it is repaid); reports, which only
// take tokens, always go to Redis and drop their snapshots. The remaining and
// reset of a local rejection are optimistic by whatever other replicas
// charged meanwhile. Requests with a request id or repeated buckets always
// go to Redis.
//
// A local answer does not advance the bucket's cursor in Redis. That
// matters only to a request decided later at an earlier instant (another
// replica whose clock is behind): it refills from the older cursor, so it
// finds fewer tokens than it would have, never more.
//
// The cache is bounded in bytes: a fixed table of denyEntry slots, direct
// mapped by the bucket's hash (a collision replaces), in shards with a
// lock each.
type denyCache struct {
	shards [denyShards]denyShard
	maxAge int64
}

const denyShards = 16

type denyShard struct {
	mu    sync.Mutex
	slots []denyEntry
}

// denyEntry is one bucket's snapshot: about 80 bytes.
type denyEntry struct {
	tag      [16]byte
	version  *bucket.Version
	revision int64
	state    bucket.State // uncharged, on this replica's clock
	until    int64        // fresh before this instant
}

// denyEntryBytes is what one slot costs, for the byte budget.
const denyEntryBytes = 16 + 8 + 8 + 24 + 8

// newDenyCache returns a cache of about bytes, or nil for bytes <= 0.
func newDenyCache(bytes int, maxAge int64) *denyCache {
	per := bytes / denyEntryBytes / denyShards
	if per < 1 {
		return nil
	}
	c := &denyCache{maxAge: maxAge}
	for i := range c.shards {
		c.shards[i].slots = make([]denyEntry, per)
	}
	return c
}

func (c *denyCache) slot(tag *[16]byte) (*denyShard, int) {
	h := binary.LittleEndian.Uint64(tag[:8])
	sh := &c.shards[h%denyShards]
	return sh, int((h / denyShards) % uint64(len(sh.slots)))
}

// answerable: requests the cache decides and learns from: no request id,
// at most denyMaxItems buckets, none twice (a repeated bucket's answers
// are not its uncharged balance), no report (usage, which Redis must
// charge whatever the answer).
func answerable(req *store.Request, tags [][16]byte) bool {
	if req.ID != "" || len(req.Items) > denyMaxItems || !distinct(tags) {
		return false
	}
	for i := range req.Items {
		if req.Items[i].Charge == store.Report {
			return false
		}
	}
	return true
}

// answer decides req from snapshots: true when every item had a fresh one
// and the request is rejected, with results filled as Redis would.
func (c *denyCache) answer(req *store.Request, tags [][16]byte, results []store.Result) bool {
	if !answerable(req, tags) {
		return false
	}
	var states [denyMaxItems]bucket.State
	for i := range req.Items {
		it := &req.Items[i]
		sh, k := c.slot(&tags[i])
		sh.mu.Lock()
		e := sh.slots[k]
		sh.mu.Unlock()
		if e.tag != tags[i] || e.version != it.Version || e.revision != it.Revision || req.Now >= e.until {
			return false
		}
		states[i] = e.state
	}
	rejected := false
	for i := range req.Items {
		it := &req.Items[i]
		p := it.Version.Params
		st := p.Refill(states[i], req.Now)
		_, r := it.Charge.Decide(p, st, req.Now, it.Cost)
		if !r.Never {
			r.Remaining, r.Debt = st.Remaining(), st.Debt()
		}
		results[i] = store.Result{Result: r, ResetAfter: p.UntilFull(st, req.Now)}
		rejected = rejected || !r.Allowed
	}
	return rejected
}

// denyMaxItems bounds the requests the cache answers (its checks are
// quadratic in items; the heaviest requests go to Redis, and admission).
const denyMaxItems = 16

// learn keeps the snapshots of a request Redis rejected. Every other
// answer drops its buckets' snapshots: an allowed request changed them,
// and a bucket Redis decided without a snapshot may have moved to another
// version.
// forget drops the snapshots of tags' buckets (a refund changed them).
func (c *denyCache) forget(tags [][16]byte) {
	for i := range tags {
		sh, k := c.slot(&tags[i])
		sh.mu.Lock()
		if e := &sh.slots[k]; e.tag == tags[i] {
			*e = denyEntry{}
		}
		sh.mu.Unlock()
	}
}

func (c *denyCache) learn(req *store.Request, tags [][16]byte, allowed bool, items []itemRecord) {
	keep := !allowed && answerable(req, tags)
	for i := range req.Items {
		sh, k := c.slot(&tags[i])
		sh.mu.Lock()
		switch e := &sh.slots[k]; {
		case keep && items[i].snapshot:
			r := items[i].res
			life := r.RetryAfter
			if r.Allowed {
				life = r.ResetAfter
			}
			*e = denyEntry{
				tag: tags[i], version: req.Items[i].Version, revision: req.Items[i].Revision,
				state: bucket.State{Tokens: r.Remaining - r.Debt, Frac: items[i].extra1, At: req.Now + items[i].extra2},
				until: req.Now + min(life, c.maxAge),
			}
		case e.tag == tags[i]:
			*e = denyEntry{}
		}
		sh.mu.Unlock()
	}
}
