package memory

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/tokengate/tokengate/pkg/store"
)

const replayShards = 64

// replays remembers the answers of requests that carried an id. Each shard
// is a map plus a FIFO of ids in arrival order; every id lives for the same
// window, so the FIFO's head is always the next to expire, and a full FIFO
// forgets its oldest id early.
type replays struct {
	seed   maphash.Seed
	window int64
	limit  int // ids per shard
	shards [replayShards]replayShard
}

type replayShard struct {
	mu      sync.Mutex
	byID    map[string]*answer
	fifo    []*answer // ring buffer
	head, n int
	hits    uint64 // replayed answers
	refused uint64 // repeats of an id decided anew (other items, or no replays left)
	early   uint64 // ids forgotten before their window ended
	_       [64]byte
}

type answer struct {
	id      string
	fp      [16]byte // store.Fingerprint of the items asked
	left    int      // replays left
	expires int64
	outcome store.Outcome
	results []store.Result
}

func newReplays(maxIDs int, window int64) *replays {
	r := &replays{seed: maphash.MakeSeed(), window: window, limit: max(1, maxIDs/replayShards)}
	for i := range r.shards {
		r.shards[i].byID = make(map[string]*answer)
		r.shards[i].fifo = make([]*answer, r.limit)
	}
	return r
}

// do answers req from memory when its id was seen within the window with
// the same items (and replays are left), and otherwise decides it with
// decide and, for a new id, remembers the answer. The id's lock is held
// across decide, so two concurrent requests with one id are decided once;
// it is taken before any bucket lock (the fixed lock order).
func (r *replays) do(req *store.Request, results []store.Result, decide func(*store.Request, []store.Result) store.Outcome) store.Outcome {
	sh := &r.shards[maphash.String(r.seed, req.ID)%replayShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.expire(req.Now)
	fp := store.Fingerprint(req.Items)
	if a, ok := sh.byID[req.ID]; ok {
		if a.fp != fp || a.left == 0 {
			sh.refused++
			return decide(req, results)
		}
		a.left--
		sh.hits++
		copy(results, a.results)
		out := a.outcome
		out.Replayed = true
		return out
	}
	out := decide(req, results)
	a := &answer{id: strings.Clone(req.ID), fp: fp, left: store.MaxReplays, expires: req.Now + r.window, outcome: out,
		results: append([]store.Result(nil), results[:len(req.Items)]...)}
	if sh.n == r.limit {
		sh.early++
		sh.pop()
	}
	sh.fifo[(sh.head+sh.n)%r.limit] = a
	sh.n++
	sh.byID[a.id] = a
	return out
}

// expire forgets ids whose window has ended by now.
func (sh *replayShard) expire(now int64) {
	for sh.n > 0 && sh.fifo[sh.head].expires <= now {
		sh.pop()
	}
}

func (sh *replayShard) pop() {
	a := sh.fifo[sh.head]
	delete(sh.byID, a.id)
	sh.fifo[sh.head] = nil
	sh.head = (sh.head + 1) % len(sh.fifo)
	sh.n--
}

// sweep expires old ids in every shard.
func (r *replays) sweep(now int64) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		sh.expire(now)
		sh.mu.Unlock()
	}
}
