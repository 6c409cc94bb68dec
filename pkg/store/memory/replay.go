package memory

// The replay table, bounded twice. Every id lives for the same window, so
// each shard is a map plus a FIFO of ids in arrival order: the FIFO's head
// is always the next to expire, and a shard that is full, in ids or in
// bytes, forgets its oldest ids early (counted) to make room for a new one.
//
// An id is kept as 16 bytes whatever the client sent: the service passes a
// 128-bit hash (store.Request.ID), and an id of another length, from
// another caller, is hashed here. So an id costs the same few hundred bytes
// however long it was, and what varies is its answer: one store.Result per
// item, up to store.MaxItems. The byte bound is on that sum.

import (
	"crypto/sha256"
	"hash/maphash"
	"sync"
	"unsafe"

	"github.com/tokengate/tokengate/pkg/store"
)

const replayShards = 64

// MaxReplayBytes bounds the memory of the replay table: the remembered
// answers, their results and their map entries, as entryBytes counts them
// (an upper bound: TestReplayBytesBound measures the heap). Past it the
// oldest ids are forgotten early, as past Options.MaxRequestIDs. On top of
// it each of MaxRequestIDs has an 8-byte FIFO slot, allocated up front.
//
// At 36 MiB the default 100,000 ids fit with up to 3 items each (256 to
// 352 bytes an id, a result holding a post-paid item's debt and forgiven
// tokens); ids of requests with all 64 items, about 11,500.
const MaxReplayBytes = 36 << 20

// Memory one remembered id holds, for the byte bound (entryBytes).
const (
	answerBytes = int(unsafe.Sizeof(answer{}))
	resultBytes = int(unsafe.Sizeof(store.Result{}))
	// mapEntryBytes is a key and a pointer in the map (24 bytes) with the
	// table's spare room: at most 7/8 full, half empty after it doubles,
	// and under churn holding deleted slots until it is rebuilt.
	mapEntryBytes = 128
)

// entryBytes is what an id costs the byte bound when its answer has room
// for n results (the capacity the allocator rounded the results up to).
func entryBytes(n int) int { return answerBytes + mapEntryBytes + n*resultBytes }

// replayID is a request id as the table keeps it: with what the request
// asked for, so that one id asking for other buckets or costs (a check,
// then its report) is remembered apart, each replayed on its own, as the
// Redis store keys its records.
type replayID [16]byte

// idOf is req.ID and the fingerprint of its items as the table keeps
// them: the first 16 bytes of the SHA-256 of the id (hashed first when it
// is not the service's 16-byte hash) and the fingerprint.
func idOf(id string, fp [16]byte) replayID {
	var buf [32]byte
	k := idKey(id)
	copy(buf[:], k[:])
	copy(buf[16:], fp[:])
	sum := sha256.Sum256(buf[:])
	return replayID(sum[:16])
}

// idKey is a request id as 16 bytes: the service's hash as it is, any
// other id the first 16 bytes of its SHA-256.
func idKey(id string) [16]byte {
	var k [16]byte
	if len(id) == 16 {
		copy(k[:], id)
	} else {
		sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(id), len(id)))
		copy(k[:], sum[:16])
	}
	return k
}

// replays remembers the answers of requests that carried an id.
type replays struct {
	seed   maphash.Seed
	window int64
	limit  int // ids per shard
	bytes  int // entryBytes per shard
	shards [replayShards]replayShard
}

type replayShard struct {
	mu      sync.Mutex
	byID    map[replayID]*answer
	fifo    []*answer // ring buffer
	head, n int
	bytes   int    // entryBytes of the ids held
	hits    uint64 // replayed answers
	refused uint64 // repeats of an id decided anew (other items, or no replays left)
	early   uint64 // ids forgotten before their window ended
	_       [64]byte
}

type answer struct {
	id      replayID
	fp      [16]byte // store.Fingerprint of the items asked
	left    int      // replays left
	expires int64
	outcome store.Outcome
	results []store.Result
}

// newReplays returns a table of at most maxIDs ids and MaxReplayBytes.
func newReplays(maxIDs int, window int64) *replays {
	return newReplaysBytes(maxIDs, MaxReplayBytes, window)
}

// newReplaysBytes returns a table of at most maxIDs ids and maxBytes, but
// no less than one id of store.MaxItems items per shard.
func newReplaysBytes(maxIDs, maxBytes int, window int64) *replays {
	r := &replays{
		seed: maphash.MakeSeed(), window: window,
		limit: max(1, maxIDs/replayShards),
		bytes: max(entryBytes(store.MaxItems), maxBytes/replayShards),
	}
	for i := range r.shards {
		r.shards[i].byID = make(map[replayID]*answer)
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
	fp := store.Fingerprint(req.Items)
	id := idOf(req.ID, fp)
	sh := &r.shards[maphash.Bytes(r.seed, id[:])%replayShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.expire(req.Now)
	if a, ok := sh.byID[id]; ok {
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
	a := &answer{id: id, fp: fp, left: store.MaxReplays, expires: req.Now + r.window, outcome: out,
		results: append([]store.Result(nil), results[:len(req.Items)]...)}
	size := entryBytes(cap(a.results))
	for sh.n == r.limit || sh.n > 0 && sh.bytes+size > r.bytes {
		sh.early++
		sh.pop()
	}
	sh.fifo[(sh.head+sh.n)%r.limit] = a
	sh.n++
	sh.bytes += size
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
	sh.bytes -= entryBytes(cap(a.results))
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
