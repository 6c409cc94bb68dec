package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"pgregory.net/rapid"
)

// The model's reservations and request ids (store.go, "Reservations"),
// as plainly as they are specified: a map of every reservation, returned
// at the first decision of its bucket at or after its expiry, and a map of
// every answer given for an id and fingerprint.

type holdKey struct{ id, key string }

type modelHold struct{ n, expires int64 }

// returnExpired returns to st (bucket key, brought forward to params p)
// every reservation of key that has expired by now, each refilled up to
// its expiry first; in any order, since each adds and caps.
func (m *model) returnExpired(key string, p bucket.Params, st bucket.State, now int64) bucket.State {
	for k, h := range m.holds {
		if k.key == key && h.expires <= now {
			st, _ = p.Decide(st, h.expires, -h.n)
			delete(m.holds, k)
		}
	}
	return st
}

// sweep is a janitor's sweep at now: every expired reservation returned
// under its bucket's own version, then every bucket dropped that is full
// under its rule's current version and owes no reservation, its cursor
// kept in forgot.
func (m *model) sweep(now int64) {
	for k, b := range m.buckets {
		b.s = m.returnExpired(k, b.v.Params, b.s, now)
		m.buckets[k] = b
	}
	for k, b := range m.buckets {
		cur := b.v.Lineage().Current()
		if cur == nil || cur.ID < b.v.ID {
			cur = b.v
		}
		if st := cur.Params.Refill(cur.Bring(b.s, b.v), now); st.Tokens == cur.Params.Capacity() && !m.owes(k) {
			delete(m.buckets, k)
			m.forgot = max(m.forgot, b.s.At)
		}
	}
}

// owes reports whether bucket key has a reservation to return.
func (m *model) owes(key string) bool {
	for k := range m.holds {
		if k.key == key {
			return true
		}
	}
	return false
}

// settle removes the reservation of id on key and returns its tokens (0
// when there is none).
func (m *model) settle(id, key string) int64 {
	k := holdKey{id, key}
	h, ok := m.holds[k]
	if id == "" || !ok {
		return 0
	}
	delete(m.holds, k)
	return h.n
}

func (m *model) held(id, key string) bool {
	_, ok := m.holds[holdKey{id, key}]
	return ok
}

// hold records the reservations an allowed request made.
func (m *model) hold(id string, now int64, reserving map[string]store.Item) {
	for key, it := range reserving {
		m.holds[holdKey{id, key}] = modelHold{n: it.Reserve, expires: now + it.ReserveTTL}
	}
}

// modelAnswer is a remembered answer of a request id.
type modelAnswer struct {
	left    int
	allowed bool
	results []store.Result
}

// replayModel is the model behind request ids: an id and fingerprint seen
// before replays its first answer, at most store.MaxReplays times, then is
// decided anew. Its ids are used within 20s of their first use on a clock
// that never goes back, so no store's replay window (30s by default) ends
// for one of them.
type replayModel struct {
	*model
	answers map[string]*modelAnswer
}

func (r *replayModel) decide(req *store.Request) (allowed, replayed bool, res []store.Result) {
	if req.ID == "" {
		allowed, res = r.model.decide(req)
		return allowed, false, res
	}
	fp := store.Fingerprint(req.Items)
	k := req.ID + "\x00" + string(fp[:])
	if a, ok := r.answers[k]; ok {
		if a.left > 0 {
			a.left--
			return a.allowed, true, a.results
		}
		allowed, res = r.model.decide(req)
		return allowed, false, res
	}
	allowed, res = r.model.decide(req)
	r.answers[k] = &modelAnswer{left: store.MaxReplays, allowed: allowed, results: res}
	return allowed, false, res
}

// testReserveModel runs random checks that reserve, reports that settle,
// plain checks, pre-paid items, retries of a request id (the same items
// again) and reports of an id with other costs, on an advancing clock past
// the reservations' expiries, against the model: every answer equal.
// With sweep (the store's janitor), it sweeps the store and the model at
// random instants too.
func testReserveModel(t *testing.T, newStore Factory, sweep func(store.Store, int64)) {
	rapid.Check(t, func(rt *rapid.T) {
		s := newStore(t)
		rules := []*bucket.Version{PostPaidVersion(t, 1, 5, "2/s", 7), PostPaidVersion(t, 2, 40, "7/3s", 60)}
		keys := []string{"r0/a", "r0/b", "r1/a", "r1/b"}
		nextID := uint64(3)
		m := &replayModel{model: newModel(), answers: map[string]*modelAnswer{}}
		type liveID struct {
			born int64
			last []store.Item
		}
		ids := map[string]*liveID{}
		serial := 0
		now := int64(0)
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			now += rapid.Int64Range(0, 3*sec).Draw(rt, "dt")
			for id, l := range ids {
				if now-l.born >= 20*sec {
					delete(ids, id)
				}
			}
			kind := rapid.IntRange(0, 9).Draw(rt, "kind")
			if kind == 1 && sweep != nil {
				sweep(s, now)
				m.sweep(now)
				continue
			}
			if kind == 0 {
				r := rapid.IntRange(0, 1).Draw(rt, "rule")
				p := Params(t, rapid.Int64Range(1, 50).Draw(rt, "capacity"), rapid.SampledFrom([]string{"1/s", "3/s", "5/2s"}).Draw(rt, "rate"))
				p, _ = p.WithMaxDebt(rapid.SampledFrom([]int64{0, 1, 7, 60}).Draw(rt, "debt"))
				rules[r] = rules[r].Next(nextID, p, now, bucket.ResizeMode(rapid.IntRange(0, 1).Draw(rt, "mode")))
				rules[r].Lineage().Publish(rules[r])
				nextID++
				continue
			}
			req := &store.Request{Now: now}
			switch rapid.IntRange(0, 3).Draw(rt, "id") {
			case 0: // no id
			case 1: // a new id
				serial++
				req.ID = fmt.Sprint("req-", serial)
				ids[req.ID] = &liveID{born: now}
			default: // a live id, when there is one
				if live := sortedKeys(ids); len(live) > 0 {
					req.ID = rapid.SampledFrom(live).Draw(rt, "live")
				}
			}
			if l := ids[req.ID]; l != nil && l.last != nil && rapid.Bool().Draw(rt, "retry") {
				req.Items = l.last
			} else {
				for range rapid.IntRange(1, 3).Draw(rt, "items") {
					k := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
					req.Items = append(req.Items, reserveModelItem(rt, keys[k], rules[k/2], req.ID != ""))
				}
				if l != nil {
					l.last = req.Items
				}
			}
			wantAllowed, wantReplayed, want := m.decide(req)
			out, got := call(t, s, req.Now, req.ID, req.Items...)
			if out.Allowed != wantAllowed || out.Replayed != wantReplayed {
				rt.Fatalf("at %v id %q: %+v, model allowed %v replayed %v", time.Duration(now), req.ID, out, wantAllowed, wantReplayed)
			}
			for i := range want {
				if got[i] != want[i] {
					rt.Fatalf("at %v id %q item %d %+v: got %+v, model %+v", time.Duration(now), req.ID, i, req.Items[i], got[i], want[i])
				}
			}
		}
	})
}

// reserveModelItem draws one item on key of version v: a check that
// reserves (with an id), a plain check, a report or a pre-paid item.
func reserveModelItem(rt *rapid.T, key string, v *bucket.Version, withID bool) store.Item {
	it := store.Item{Key: key, Version: v, Charge: store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))}
	switch it.Charge {
	case store.Prepaid:
		it.Cost = rapid.Int64Range(-2, v.Params.Capacity()+1).Draw(rt, "cost")
	case store.Report:
		it.Cost = rapid.Int64Range(-2, 3*v.Params.Capacity()).Draw(rt, "report")
	default:
		if withID && rapid.IntRange(0, 3).Draw(rt, "reserve") > 0 {
			it.Reserve = rapid.Int64Range(1, v.Params.Capacity()).Draw(rt, "n")
			it.ReserveTTL = rapid.SampledFrom([]int64{sec, 4 * sec, 30 * sec}).Draw(rt, "ttl")
		}
	}
	return it
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
