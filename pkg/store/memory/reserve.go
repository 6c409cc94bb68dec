package memory

// Reservations (store.go, "Reservations"). Each shard holds the
// reservations of its own buckets, under its lock, so that a bucket and
// its reservations always change together: by request id and bucket (to
// settle one), and per bucket a min-heap by expiry (to return the expired
// ones before the bucket's next decision, in load, or at the janitor's
// sweep). A bucket with reservations is never dropped as full (it still
// owes them back); dropping one for another reason (its rule left, the
// cap) drops its reservations with it.
//
// They are bounded store-wide (Options.MaxReservations, one atomic count):
// a check that finds the store full is covered as its reservation would be
// and holds nothing (counted). A reservation costs about 150 bytes (the
// record, its map entry and heap slot), so the default 100,000 about 15 MB.
// A reservation is keyed by the request id's 16 bytes (idKey) and the
// bucket's key hash, never by the client's bytes.

import (
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

type holdKey struct {
	id [16]byte
	h  keyHash
}

type hold struct {
	key     holdKey
	n       int64 // tokens held
	expires int64
	index   int // in its bucket's heap
}

// holds are one shard's reservations, guarded by the shard's lock.
type holds struct {
	byKey    map[holdKey]*hold
	byBucket map[keyHash][]*hold // min-heaps by expiry
	count    *atomic.Int64       // the store's reservations, all shards
	expired  uint64              // returned unsettled, at their expiry
	dropped  uint64              // dropped with their bucket
}

// has reports whether k holds a reservation.
func (hs *holds) has(k holdKey) bool {
	_, ok := hs.byKey[k]
	return ok
}

// add records a reservation of n tokens until expires.
func (hs *holds) add(k holdKey, n, expires int64) {
	if hs.byKey == nil {
		hs.byKey, hs.byBucket = map[holdKey]*hold{}, map[keyHash][]*hold{}
	}
	x := &hold{key: k, n: n, expires: expires}
	hs.byKey[k] = x
	heap := append(hs.byBucket[k.h], x)
	x.index = len(heap) - 1
	up(heap, x.index)
	hs.byBucket[k.h] = heap
}

// settle removes k's reservation and returns its tokens, 0 when there is
// none.
func (hs *holds) settle(k holdKey) int64 {
	x, ok := hs.byKey[k]
	if !ok {
		return 0
	}
	hs.remove(x)
	return x.n
}

// returnExpired returns to st (bucket h's balance under params p) every
// reservation of h that has expired by now, each refilled up to its expiry
// first.
func (hs *holds) returnExpired(h keyHash, p bucket.Params, st bucket.State, now int64) bucket.State {
	if len(hs.byKey) == 0 {
		return st
	}
	for heap := hs.byBucket[h]; len(heap) > 0 && heap[0].expires <= now; heap = hs.byBucket[h] {
		x := heap[0]
		st, _ = p.Decide(st, x.expires, -x.n)
		hs.remove(x)
		hs.expired++
	}
	return st
}

// drop forgets bucket h's reservations: the bucket itself is gone.
func (hs *holds) drop(h keyHash) {
	for heap := hs.byBucket[h]; len(heap) > 0; heap = hs.byBucket[h] {
		hs.remove(heap[len(heap)-1])
		hs.dropped++
	}
}

// of reports whether bucket h has reservations.
func (hs *holds) of(h keyHash) bool { return len(hs.byBucket[h]) > 0 }

func (hs *holds) remove(x *hold) {
	heap := hs.byBucket[x.key.h]
	last := len(heap) - 1
	if i := x.index; i != last {
		heap[i] = heap[last]
		heap[i].index = i
		heap = heap[:last]
		if !up(heap, i) {
			down(heap, i)
		}
	} else {
		heap = heap[:last]
	}
	if len(heap) == 0 {
		delete(hs.byBucket, x.key.h)
	} else {
		hs.byBucket[x.key.h] = heap
	}
	delete(hs.byKey, x.key)
	hs.count.Add(-1)
}

// up moves heap[i] up to its place; it reports whether it moved.
func up(heap []*hold, i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if heap[p].expires <= heap[i].expires {
			break
		}
		swap(heap, i, p)
		i, moved = p, true
	}
	return moved
}

func down(heap []*hold, i int) {
	for {
		c := 2*i + 1
		if c >= len(heap) {
			return
		}
		if c+1 < len(heap) && heap[c+1].expires < heap[c].expires {
			c++
		}
		if heap[i].expires <= heap[c].expires {
			return
		}
		swap(heap, i, c)
		i = c
	}
}

func swap(heap []*hold, i, j int) {
	heap[i], heap[j] = heap[j], heap[i]
	heap[i].index, heap[j].index = i, j
}

// sweepHolds returns every reservation of the shard that has expired by
// now, under each bucket's stored version.
func (sh *shard) sweepHolds(now int64) {
	for h, heap := range sh.holds.byBucket {
		if heap[0].expires > now {
			continue
		}
		if sl := sh.buckets.find(h); sl != nil {
			sl.s = sh.holds.returnExpired(h, sh.version(sl).Params, sl.s, now)
		}
	}
}

// reserve decides item i, a check that reserves it.Reserve tokens of a
// request with id, on cur (its bucket's balance under p so far): covered,
// charging nothing, when the id holds a reservation of the bucket already
// (or an earlier item of the request just took one); else covered only
// when the tokens are there, which it takes (ws[i].reserved, to be
// recorded if the request is allowed).
func (s *Store) reserve(ws []work, i int, id [16]byte, it *store.Item, p bucket.Params, cur bucket.State, now int64) (bucket.State, bucket.Result) {
	w := &ws[i]
	if s.shards[w.shard].holds.has(holdKey{id, w.h}) || reservedEarlier(ws, i) {
		return p.Decide(cur, now, 0)
	}
	if s.holdCount.Add(1) > int64(s.opts.MaxReservations) {
		// No room: covered as the reservation would be, holding nothing.
		s.holdCount.Add(-1)
		s.unheld.Add(1)
		cur = p.Refill(cur, now)
		_, r := p.Decide(cur, now, it.Reserve)
		return cur, r
	}
	st, r := p.Decide(cur, now, it.Reserve)
	if w.reserved = r.Allowed; !r.Allowed {
		s.holdCount.Add(-1)
	}
	return st, r
}

func reservedEarlier(ws []work, i int) bool { return reserves(ws[:i], ws[i].h) }

// reserves reports whether an item of ws took a reservation of bucket h.
func reserves(ws []work, h keyHash) bool {
	for j := range ws {
		if ws[j].reserved && ws[j].h == h {
			return true
		}
	}
	return false
}

// record keeps the reservations the request took when it was allowed,
// and gives back their room in the count when it was not.
func (s *Store) record(ws []work, req *store.Request, id [16]byte, allowed bool) {
	for i := range ws {
		switch {
		case !ws[i].reserved:
		case allowed:
			it := &req.Items[i]
			s.shards[ws[i].shard].holds.add(holdKey{id, ws[i].h}, it.Reserve, req.Now+it.ReserveTTL)
		default:
			s.holdCount.Add(-1)
		}
	}
}
