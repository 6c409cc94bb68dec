package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"pgregory.net/rapid"
)

// modelBucket is the model's state of one bucket.
type modelBucket struct {
	s bucket.State
	v *bucket.Version
}

// model is the specification of a Store, written as plainly as possible on
// top of pkg/bucket: a map of every bucket ever stored. A store need not
// keep a full bucket, because a new bucket starts full; the one thing a
// forgotten full bucket could still tell is its cursor, so a new bucket's
// cursor starts no earlier than the latest cursor forgotten (forgot).
type model struct {
	buckets map[string]modelBucket
	forgot  int64
	// holds are the reservations (reservemodel.go), by request id and key.
	holds map[holdKey]modelHold
}

// decide is the specification of Store.Decide: reports first, then the
// gates (every other item) all or nothing. Reservations (req.ID and
// Item.Reserve) are reservemodel.go's.
func (m *model) decide(req *store.Request) (bool, []store.Result) {
	type work struct {
		v    *bucket.Version
		base bucket.State // brought forward, refilled and reported
		cur  bucket.State // and the gates decided so far
	}
	ws := map[string]*work{}
	res := make([]store.Result, len(req.Items))
	for i, it := range req.Items {
		w, ok := ws[it.Key]
		if !ok {
			w = &work{v: it.Version, base: it.Version.Params.Full(max(req.Now, m.forgot))}
			if b, ok := m.buckets[it.Key]; ok {
				if b.v.ID > w.v.ID {
					w.v = b.v
				}
				w.base = w.v.Params.Refill(m.returnExpired(it.Key, w.v.Params, w.v.Bring(b.s, b.v), req.Now), req.Now)
			}
			ws[it.Key] = w
		}
		if it.Charge == store.Report {
			cost := it.Cost - m.settle(req.ID, it.Key)
			w.base, res[i].Result = w.v.Params.Report(w.base, req.Now, cost)
			res[i].ResetAfter = w.v.Params.UntilFull(w.base, req.Now)
		}
	}
	for _, w := range ws {
		w.cur = w.base
	}
	allowed := true
	reserving := map[string]store.Item{} // keys this request reserves, by the item that does
	for i, it := range req.Items {
		w := ws[it.Key]
		switch {
		case it.Charge == store.Report:
			continue
		case it.Reserve > 0 && (reserving[it.Key].Reserve > 0 || m.held(req.ID, it.Key)):
			w.cur, res[i].Result = w.v.Params.Decide(w.cur, req.Now, 0)
		case it.Reserve > 0:
			w.cur, res[i].Result = w.v.Params.Decide(w.cur, req.Now, it.Reserve)
			if res[i].Allowed {
				reserving[it.Key] = it
			}
		case it.Charge == store.Check:
			w.cur, res[i].Result = w.v.Params.Check(w.cur, req.Now)
		default:
			w.cur, res[i].Result = w.v.Params.Decide(w.cur, req.Now, it.Cost)
		}
		res[i].ResetAfter = w.v.Params.UntilFull(w.cur, req.Now)
		allowed = allowed && res[i].Allowed
	}
	if allowed {
		m.hold(req.ID, req.Now, reserving)
	}
	for i, it := range req.Items {
		w := ws[it.Key]
		if allowed || it.Charge == store.Report {
			continue
		}
		if !res[i].Never {
			res[i].Remaining, res[i].Debt = w.base.Remaining(), w.base.Debt()
		}
		res[i].ResetAfter = w.v.Params.UntilFull(w.base, req.Now)
	}
	for k, w := range ws {
		st := w.base
		if allowed {
			st = w.cur
		}
		// A new bucket left full is not stored, unless it owes a
		// reservation back (the request reserved it, then refunded it).
		if _, ok := m.buckets[k]; !ok && st.Tokens == w.v.Params.Capacity() && !m.owes(k) {
			m.forgot = max(m.forgot, st.At)
			continue
		}
		m.buckets[k] = modelBucket{st, w.v}
	}
	return allowed, res
}

func newModel() *model {
	return &model{buckets: map[string]modelBucket{}, forgot: math.MinInt64, holds: map[holdKey]modelHold{}}
}

// testModel runs random requests, version changes, stale policies and clock
// steps (backwards too) against decideModel: every answer must be equal.
// Rule versions have debt bounds and items are checks and reports as well
// as pre-paid.
func testModel(t *testing.T, newStore Factory) {
	rapid.Check(t, func(rt *rapid.T) {
		s := newStore(t)
		rules := []*bucket.Version{Version(t, 1, 5, "2/s"), Version(t, 2, 40, "7/3s")}
		stale := append([]*bucket.Version(nil), rules...)
		keys := []string{"r0/a", "r0/b", "r1/a", "r1/b"}
		nextID := uint64(3)
		m := newModel()
		now := int64(0)
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			now += rapid.Int64Range(-sec, 3*sec).Draw(rt, "dt")
			if rapid.IntRange(0, 7).Draw(rt, "kind") == 0 {
				r := rapid.IntRange(0, 1).Draw(rt, "rule")
				capacity := rapid.Int64Range(1, 50).Draw(rt, "capacity")
				rate := rapid.SampledFrom([]string{"1/s", "3/s", "5/2s", "100/m"}).Draw(rt, "rate")
				mode := bucket.ResizeMode(rapid.IntRange(0, 1).Draw(rt, "mode"))
				p := Params(t, capacity, rate)
				p, _ = p.WithMaxDebt(rapid.SampledFrom([]int64{0, 0, 1, 7, 60}).Draw(rt, "debt"))
				stale[r] = rules[r]
				rules[r] = rules[r].Next(nextID, p, now, mode)
				rules[r].Lineage().Publish(rules[r])
				nextID++
				continue
			}
			req := &store.Request{Now: now}
			for range rapid.IntRange(1, 4).Draw(rt, "items") {
				k := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
				v := rules[k/2]
				if rapid.IntRange(0, 5).Draw(rt, "stale") == 0 {
					v = stale[k/2]
				}
				it := store.Item{Key: keys[k], Version: v, Charge: store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))}
				switch it.Charge {
				case store.Prepaid:
					it.Cost = rapid.Int64Range(-2, v.Params.Capacity()+1).Draw(rt, "cost")
				case store.Report:
					it.Cost = rapid.Int64Range(-2, 3*v.Params.Capacity()).Draw(rt, "report")
				}
				req.Items = append(req.Items, it)
			}
			wantAllowed, want := m.decide(req)
			out, got := call(t, s, req.Now, "", req.Items...)
			if out.Allowed != wantAllowed {
				rt.Fatalf("at %v: allowed %v, model %v", time.Duration(now), out.Allowed, wantAllowed)
			}
			for i := range want {
				if got[i] != want[i] {
					rt.Fatalf("at %v item %d %+v: got %+v, model %+v", time.Duration(now), i, req.Items[i], got[i], want[i])
				}
			}
		}
	})
}
