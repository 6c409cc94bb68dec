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

// leanMark makes the lean path say it answered, in a field a decide's
// reply leaves empty.
const leanMark = `
local leanreal = leandecide
leandecide = function(...)
  local r = leanreal(...)
  r[REPLY_SETTLE] = 'lean'
  return r
end`

// TestLeanMatchesGeneral: with expiry (the shared clock, as served), the
// lean path answers and writes exactly what the general path does, for
// buckets new and stored, charges, checks, refunds and costs above
// capacity, at random instants: each request goes once as a compact call
// and once laid out as alone (which takes the general path) on a copy of
// the same buckets; the replies are equal, so are the records, byte for
// byte, and their TTLs, within the time the two calls take. The lean
// path must answer most of them.
func TestLeanMatchesGeneral(t *testing.T) {
	orig := script
	script = newScript(luaContract, luaBignum, luaBucket, luaFast, luaCodec, luaOps, luaLean, luaBatch, leanMark)
	defer func() { script = orig }()
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	leans, calls, seq := 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		s := newStore(t, c, Options{DenyCacheBytes: -1, KeyPrefix: fmt.Sprintf("l%d:", seq)})
		var vers []*bucket.Version
		for i := range rapid.IntRange(1, 3).Draw(rt, "versions") {
			p, err := bucket.NewParams(rapid.Int64Range(1, 1000).Draw(rt, "cap"),
				mustRate(rt, rapid.Int64Range(1, 100).Draw(rt, "n"), time.Duration(rapid.SampledFrom([]int64{1, 1e6, 1e9, 36e11}).Draw(rt, "per"))))
			if err != nil {
				rt.Fatal(err)
			}
			vers = append(vers, bucket.NewVersion(uint64(i+1), p, 0))
		}
		now := int64(0)
		for range rapid.IntRange(1, 20).Draw(rt, "steps") {
			now += rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "dt")
			req := &store.Request{Now: now}
			for range rapid.IntRange(1, 4).Draw(rt, "items") {
				v := rapid.SampledFrom(vers).Draw(rt, "version")
				req.Items = append(req.Items, store.Item{Key: strconv.Itoa(rapid.IntRange(0, 9).Draw(rt, "key")), Version: v,
					Cost: rapid.Int64Range(-3, v.Params.Capacity()+1).Draw(rt, "cost")})
			}
			lean, general := decideBoth(rt, ctx, s, req)
			calls++
			if lean[replySettle] == "lean" {
				leans++
				lean[replySettle] = ""
			}
			if !slices.Equal(lean, general) {
				rt.Fatalf("at %d, %+v: lean %q, general %q", now, req.Items, lean, general)
			}
			for _, it := range req.Items {
				l, lt := record(rt, c, s.bucketKey(tag("L"+it.Key)))
				g, gt := record(rt, c, s.bucketKey(tag("G"+it.Key)))
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
// laid out as alone, and answers both raw replies.
func decideBoth(rt *rapid.T, ctx context.Context, s *Store, req *store.Request) (lean, general []string) {
	at, err := s.instant(ctx, req)
	if err != nil {
		rt.Fatal(err)
	}
	prefixed := func(p string) (*store.Request, [][16]byte, []string) {
		r := &store.Request{Now: req.Now, Items: slices.Clone(req.Items)}
		for i := range r.Items {
			r.Items[i].Key = p + r.Items[i].Key
		}
		raw := requestTags(r)
		tags := make([]string, len(raw))
		for i := range raw {
			tags[i] = tag(r.Items[i].Key)
		}
		return r, raw, tags
	}
	lr, lraw, ltags := prefixed("L")
	w := &queued{keys: s.bucketKeys(ltags, 0), compact: s.compactDecide(lr, lraw, at)}
	s.callBatch(ctx, []*queued{w})
	gr, _, gtags := prefixed("G")
	keys, args := s.decideArgs(gr, gtags, strconv.FormatUint(at, 10))
	msgs, err := s.call(ctx, keys, args)
	if w.err != nil || err != nil {
		rt.Fatalf("lean %v, general %v", w.err, err)
	}
	return flat(w.reply), flat(msgs)
}

func flat(msgs []rueidis.RedisMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		if v, err := m.AsInt64(); err == nil {
			out[i] = strconv.FormatInt(v, 10)
		} else {
			out[i], _ = m.ToString()
		}
	}
	return out
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
