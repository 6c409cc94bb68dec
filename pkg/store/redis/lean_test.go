package redis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// TestLeanMatchesGeneral: with expiry (the shared clock, as served), the
// lean path answers and writes exactly what the general path does, for
// buckets new and stored, charges, checks, refunds and costs above
// capacity, at random instants: each request goes once as a compact call
// and once laid out as alone (which takes the general path) on a copy of
// the same buckets; the replies are equal, so are the records, byte for
// byte, and their TTLs, within the time the two calls take. The lean
// path (whose reply is packed) must answer many of them. Half the
// requests go as a reserve (a cross-node request's part) instead: then
// the settle entries are equal too, the general path's from the script,
// the lean path's from the store's own items.
func TestLeanMatchesGeneral(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	leans, calls, seq := 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		s := newStore(t, c, Options{DenyCacheBytes: new(0), KeyPrefix: fmt.Sprintf("l%d:", seq)})
		var vers []*bucket.Version
		for i := range rapid.IntRange(1, 3).Draw(rt, "versions") {
			p, err := bucket.NewParams(rapid.Int64Range(1, 1000).Draw(rt, "cap"),
				mustRate(rt, rapid.Int64Range(1, 100).Draw(rt, "n"), time.Duration(rapid.SampledFrom([]int64{1, 1e6, 1e9, 36e11}).Draw(rt, "per"))))
			if err != nil {
				rt.Fatal(err)
			}
			vers = append(vers, bucket.NewVersion(uint64(i+1), withDebt(rt, p), 0))
		}
		now := int64(0)
		for range rapid.IntRange(1, 20).Draw(rt, "steps") {
			now += rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "dt")
			req := &store.Request{Now: now}
			for range rapid.IntRange(1, 4).Draw(rt, "items") {
				v := rapid.SampledFrom(vers).Draw(rt, "version")
				req.Items = append(req.Items, drawItemOf(rt, strconv.Itoa(rapid.IntRange(0, 9).Draw(rt, "key")), v))
			}
			lean, general, packed, ok := "", "", false, false
			if rapid.Bool().Draw(rt, "reserve") {
				lean, general, packed, ok = reserveBoth(rt, ctx, s, req)
			}
			if !ok {
				lean, general, packed = decideBoth(rt, ctx, s, req)
			}
			calls++
			if packed {
				leans++
			}
			if lean != general {
				rt.Fatalf("at %d, %+v: lean %s, general %s", now, req.Items, lean, general)
			}
			for _, it := range req.Items {
				l, lt := record(rt, c, s.bucketKey(tagBytes("L"+it.Key)))
				g, gt := record(rt, c, s.bucketKey(tagBytes("G"+it.Key)))
				if l != g || math.Abs(float64(lt-gt)) > 100 {
					rt.Fatalf("at %d, bucket %s: lean stored %q (pttl %d), general %q (pttl %d)", now, it.Key, l, lt, g, gt)
				}
			}
		}
	})
	t.Logf("%d of %d requests answered by the lean path", leans, calls)
	if leans < calls/3 {
		t.Fatalf("the lean path answered %d of %d requests", leans, calls)
	}
}

// decideBoth decides req on keys "L"+key as a compact call and on "G"+key
// laid out as alone, and answers both replies, decoded, and whether the
// first was packed.
func decideBoth(rt *rapid.T, ctx context.Context, s *Store, req *store.Request) (lean, general string, packed bool) {
	w := prefixedCall(rt, ctx, s, "L", req.Now, "", req.Items, false)
	s.callBatch(ctx, []*queued{w})
	g := prefixedCall(rt, ctx, s, "G", req.Now, "", req.Items, true)
	g.reply, g.err = s.call(ctx, g.keys, g.args)
	return decodedReply(rt, s, w, len(req.Items)), decodedReply(rt, s, g, len(req.Items)), w.reply == nil
}

// reserveBoth reserves req's items as decideBoth decides them, as the
// part of a cross-node request on one node: both answers (allowed, each
// item, the settle entries), and whether the first was packed; ok is
// false when req cannot reserve compact (a refund).
func reserveBoth(rt *rapid.T, ctx context.Context, s *Store, req *store.Request) (lean, general string, packed, ok bool) {
	l := prefixedRequest(rt, ctx, s, "L", req)
	g := prefixedRequest(rt, ctx, s, "G", req)
	idx := make([]int, len(req.Items))
	for i := range idx {
		idx[i] = i
	}
	c := s.compactReserve(l.req, idx, l.raw, l.at)
	if c == nil {
		return "", "", false, false
	}
	w := &queued{keys: s.bucketKeys(l.raw), compact: c}
	s.callBatch(ctx, []*queued{w})
	args := s.header(nil, opReserve, strconv.FormatUint(g.at, 10), idNone, len(g.req.Items), "", "")
	for i := range g.req.Items {
		args = s.item(args, &g.req.Items[i], g.req.Now)
	}
	gc := call{keys: s.bucketKeys(g.raw), args: args}
	gc.reply, gc.err = s.call(ctx, gc.keys, gc.args)
	answer := func(c call) string {
		r := s.parseGroup(c, len(req.Items))
		if r.err != nil {
			rt.Fatal(r.err)
		}
		// Only the general path knows a bucket was new; a settle reads
		// that only without expiry, when the lean path takes none.
		settle := r.entries(false)
		for i := range settle {
			settle[i].isNew = false
		}
		return fmt.Sprintf("allowed %v %+v settle %+v", r.allowed, r.items, settle)
	}
	return answer(call{keys: w.keys, compact: c, reply: w.reply, packed: w.packed, err: w.err}), answer(gc), w.reply == nil, true
}

// prefixed is a request with its keys (and id) prefixed, its instant on
// the script's clock and its hash tags.
type prefixed struct {
	req *store.Request
	at  uint64
	raw [][16]byte
}

func prefixedRequest(rt *rapid.T, ctx context.Context, s *Store, prefix string, r *store.Request) prefixed {
	req := &store.Request{Now: r.Now, Items: slices.Clone(r.Items)}
	if r.ID != "" {
		req.ID = prefix + r.ID
	}
	for i := range req.Items {
		req.Items[i].Key = prefix + req.Items[i].Key
	}
	at, err := s.instant(ctx, req)
	if err != nil {
		rt.Fatal(err)
	}
	return prefixed{req: req, at: at, raw: requestTags(req)}
}

// record is a bucket's stored record and its PTTL.
func record(rt *rapid.T, c rueidis.Client, key string) (string, int64) {
	ctx := context.Background()
	v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		rt.Fatal(err)
	}
	ttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		rt.Fatal(err)
	}
	return strings.Clone(v), ttl
}

// TestDecodePackedLength: a packed reply of the wrong size for its items is
// an error, not a misread.
func TestDecodePackedLength(t *testing.T) {
	items := make([]itemRecord, 2)
	for _, n := range []int{0, 8, 8 * replyItemFields, 8*(1+replyItemFields*2) + 1} {
		if _, err := decodePacked(strings.Repeat("\x00", n), items); err == nil {
			t.Errorf("%d bytes for 2 items: no error", n)
		}
	}
	if _, err := decodePacked(strings.Repeat("\x00", 8*(1+replyItemFields*2)), items); err != nil {
		t.Error(err)
	}
}

// TestLeanSharedKeys: calls of one batch that share a bucket are each
// decided by the lean path (packed replies), the later one on what the
// earlier left.
func TestLeanSharedKeys(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{DenyCacheBytes: new(0)})
	ctx := context.Background()
	p, err := bucket.NewParams(100, mustRate(nil, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(1, p, 0)
	left := map[string]int64{"a": 100, "hot": 100, "z": 100}
	for round := range 3 { // the first with new buckets, then stored ones
		calls := [][]store.Item{{{Key: "a", Cost: 3}, {Key: "hot", Cost: 4}}, {{Key: "hot", Cost: 3}, {Key: "z", Cost: 1}}}
		var batch []*queued
		for _, items := range calls {
			req := &store.Request{Items: items}
			for i := range items {
				items[i].Version = v
			}
			at, err := s.instant(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			raw := requestTags(req)
			batch = append(batch, &queued{keys: s.bucketKeys(raw), compact: s.compactDecide(req, raw, at)})
		}
		s.callBatch(ctx, batch)
		for i, w := range batch {
			if w.err != nil || w.reply != nil {
				t.Fatalf("round %d call %d: error %v, unpacked reply %v", round, i, w.err, w.reply)
			}
			got := make([]itemRecord, 2)
			if _, err := decodePacked(w.packed, got); err != nil {
				t.Fatal(err)
			}
			for j, it := range calls[i] {
				left[it.Key] -= it.Cost
				if r := got[j].res; !r.Allowed || r.Remaining != left[it.Key] {
					t.Errorf("round %d call %d %s: %+v, want allowed with %d left", round, i, it.Key, r, left[it.Key])
				}
			}
		}
	}
}

// TestBatchMatchesSequential: a batch of calls (compact ones, lean or
// not, some sharing buckets, and calls with a request id, laid out as
// alone) answers and leaves exactly what the same calls sent one by one
// do: the replies, and every bucket's record byte for byte and its TTL.
// Shared buckets' lean writes wait for the end of the batch or for a call
// on the general path (lua/lean.lua), which this exercises.
func TestBatchMatchesSequential(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	seq := 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		s := newStore(t, c, Options{DenyCacheBytes: new(0), RequestTime: rapid.Bool().Draw(rt, "own clock"), KeyPrefix: fmt.Sprintf("q%d:", seq)})
		var vers []*bucket.Version
		for i := range 2 {
			p, err := bucket.NewParams(rapid.Int64Range(1, 20).Draw(rt, "cap"), mustRate(rt, 1, time.Duration(rapid.SampledFrom([]int64{1e6, 1e9}).Draw(rt, "per"))))
			if err != nil {
				rt.Fatal(err)
			}
			vers = append(vers, bucket.NewVersion(uint64(i+1), withDebt(rt, p), 0))
		}
		now, id := int64(0), 0
		keys := []string{"a", "b", "c", "d"}
		for range rapid.IntRange(1, 6).Draw(rt, "batches") {
			var batch, alone []*queued
			var sizes []int
			for range rapid.IntRange(2, 6).Draw(rt, "calls") {
				now += rapid.Int64Range(0, 3e8).Draw(rt, "dt")
				var items []store.Item
				for range rapid.IntRange(1, 3).Draw(rt, "items") {
					v := rapid.SampledFrom(vers).Draw(rt, "version")
					items = append(items, drawItemOf(rt, rapid.SampledFrom(keys).Draw(rt, "key"), v))
				}
				rid := ""
				switch rapid.IntRange(0, 4).Draw(rt, "with id") {
				case 0:
					id++
					rid = strconv.Itoa(id)
				case 1: // an earlier call's: its report settles, its check holds already
					if id > 0 {
						rid = strconv.Itoa(rapid.IntRange(1, id).Draw(rt, "earlier id"))
					}
				}
				if rid != "" {
					reserveSome(rt, items)
				}
				batch = append(batch, prefixedCall(rt, ctx, s, "B", now, rid, items, false))
				alone = append(alone, prefixedCall(rt, ctx, s, "S", now, rid, items, false))
				sizes = append(sizes, len(items))
			}
			s.callBatch(ctx, batch)
			for i, w := range alone {
				s.callBatch(ctx, []*queued{w})
				b, a := decodedReply(rt, s, batch[i], sizes[i]), decodedReply(rt, s, w, sizes[i])
				if b != a {
					rt.Fatalf("call %d: in the batch %s, alone %s", i, b, a)
				}
			}
			for _, k := range keys {
				b, bt := record(rt, c, s.bucketKey(tagBytes("B"+k)))
				a, at := record(rt, c, s.bucketKey(tagBytes("S"+k)))
				if b != a || math.Abs(float64(bt-at)) > 1000 {
					rt.Fatalf("bucket %s: the batch left %q (pttl %d), the calls alone %q (pttl %d)", k, b, bt, a, at)
				}
			}
		}
	})
}

// reserveSome makes some checks of items reserve (a request with an id):
// up to their capacity, for as long as a few calls.
func reserveSome(rt *rapid.T, items []store.Item) {
	for i := range items {
		if it := &items[i]; it.Charge == store.Check && rapid.Bool().Draw(rt, "reserve") {
			it.Reserve = rapid.Int64Range(1, it.Version.Params.Capacity()).Draw(rt, "reserve n")
			it.ReserveTTL = rapid.SampledFrom([]int64{2e8, 1e9}).Draw(rt, "reserve ttl")
		}
	}
}

// withDebt is p with a debt bound drawn for it: none, or one that reports
// reach and go beyond.
func withDebt(rt *rapid.T, p bucket.Params) bucket.Params {
	p, err := p.WithMaxDebt(rapid.SampledFrom([]int64{0, 0, 3, 1000}).Draw(rt, "debt"))
	if err != nil {
		rt.Fatal(err)
	}
	return p
}

// drawItemOf draws an item of bucket key under v: pre-paid (charges,
// refunds, costs above capacity), a check, or a report (refunds, into a
// debt and beyond its bound).
func drawItemOf(rt *rapid.T, key string, v *bucket.Version) store.Item {
	it := store.Item{Key: key, Version: v, Charge: store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))}
	switch c := v.Params.Capacity(); it.Charge {
	case store.Prepaid:
		it.Cost = rapid.Int64Range(-3, c+1).Draw(rt, "cost")
	case store.Report:
		it.Cost = rapid.Int64Range(-3, 2*c+v.Params.MaxDebt()).Draw(rt, "report")
	}
	return it
}

// prefixedCall is a decide of items (keys prefixed) at now: compact, or
// laid out as alone when it has a request id or classic is set.
func prefixedCall(rt *rapid.T, ctx context.Context, s *Store, prefix string, now int64, id string, items []store.Item, classic bool) *queued {
	p := prefixedRequest(rt, ctx, s, prefix, &store.Request{Now: now, ID: id, Items: items})
	if c := s.compactDecide(p.req, p.raw, p.at); c != nil && !classic {
		return &queued{keys: s.bucketKeys(p.raw), compact: c}
	}
	keys, args := s.decideArgs(p.req, p.raw, strconv.FormatUint(p.at, 10))
	return &queued{keys: keys, args: args}
}

func decodedReply(rt *rapid.T, s *Store, w *queued, n int) string {
	if w.err != nil {
		rt.Fatal(w.err)
	}
	items := make([]itemRecord, n)
	r, err := s.decodeCall(w, items)
	if err != nil {
		rt.Fatal(err)
	}
	return fmt.Sprintf("%+v %+v", r, items)
}
