package redis

import (
	"context"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// classicEcho makes the script answer each compact call of a batch with
// the arguments it lays the call out as alone (batch.lua, classic), in
// place of running it.
const classicEcho = `
compactcall = function(keys, ko, s)
  local ci, nh, nl, fh, fl, n, _, pos = struct.unpack(CALL_FORMAT, s)
  return classic(BATCH_HEAD + (ci - 1) * HEADER_ARGS, nh, nl, fh, fl, n, s, pos)
end`

// TestCompactRoundTrip: a compact call, laid out as alone by the script,
// is exactly the call the store lays out alone (decideArgs), for random
// requests: costs, charges, debt bounds, revisions, versions with earlier ones, activations
// before and after the request's instant, the shared clock or the
// request's own with a floor; and batches that mix calls of two stores.
func TestCompactRoundTrip(t *testing.T) {
	orig := script
	script = newScript(append(slices.Clone(luaFiles), luaFile{"classicEcho", classicEcho})...)
	defer func() { script = orig }()
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	shared := newStore(t, c, Options{DenyCacheBytes: new(0)})
	own := newStore(t, c, Options{RequestTime: true, DenyCacheBytes: new(0)})
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		var batch []*queued
		var want [][]string
		for range rapid.IntRange(1, 4).Draw(rt, "calls") {
			s := shared
			if rapid.Bool().Draw(rt, "own") {
				s = own
				own.forgot.Store(minInt64)
				if rapid.Bool().Draw(rt, "floor") {
					own.forgot.Store(rapid.Int64().Draw(rt, "forgot"))
				}
			}
			// The shared clock counts from the epoch of the Redis host's.
			lo := -shared.clock.offset.Load()
			if s == own {
				lo = -1 << 62
			}
			now := rapid.Int64Range(lo, 1<<62).Draw(rt, "now")
			req := &store.Request{Now: now}
			for i := range rapid.IntRange(1, 5).Draw(rt, "items") {
				p, err := bucket.NewParams(rapid.Int64Range(1, math.MaxInt64).Draw(rt, "cap"),
					mustRate(rt, rapid.Int64Range(1, 1<<40).Draw(rt, "n"), time.Duration(rapid.Int64Range(1, 1<<50).Draw(rt, "per"))))
				if err != nil {
					rt.Skip(err)
				}
				if p, err = p.WithMaxDebt(rapid.Int64Range(0, bucket.MaxDebt).Draw(rt, "debt")); err != nil {
					rt.Fatal(err)
				}
				v := bucket.NewVersion(uint64(i+1), p, now-rapid.Int64Range(-1<<40, 1<<61).Draw(rt, "age"))
				if rapid.Bool().Draw(rt, "next") {
					v = v.Next(uint64(i+10), p, v.ActiveAt+rapid.Int64Range(-1<<30, 1<<30).Draw(rt, "step"), bucket.Scale)
				}
				key := "k" + strconv.Itoa(rapid.IntRange(0, 3).Draw(rt, "key"))
				it := store.Item{Key: key, Version: v, Revision: rapid.Int64Range(0, math.MaxInt64).Draw(rt, "rev"),
					Charge: store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))}
				if it.Charge != store.Check {
					it.Cost = rapid.Int64Range(-maxExact+1, maxExact-1).Draw(rt, "cost")
				}
				req.Items = append(req.Items, it)
			}
			raw, at, cc := compactCallOf(rt, ctx, s, req)
			keys, args := s.decideArgs(req, raw, strconv.FormatUint(at, 10))
			batch = append(batch, &queued{keys: keys, compact: cc, done: make(chan struct{})})
			want = append(want, args)
		}
		shared.callBatch(ctx, batch)
		for i, w := range batch {
			if w.err != nil {
				rt.Fatalf("call %d: %v", i, w.err)
			}
			got := make([]string, len(w.reply))
			for j := range w.reply {
				got[j], _ = w.reply[j].ToString()
			}
			if !slices.Equal(got, want[i]) {
				rt.Fatalf("call %d laid out as\n%q\nwant\n%q", i, got, want[i])
			}
		}
	})
}

// compactCallOf is req's compact decide call, with its buckets' hash
// tags and its instant on the script's clock; a request that takes none
// fails the test.
func compactCallOf(t interface {
	Helper()
	Fatalf(string, ...any)
}, ctx context.Context, s *Store, req *store.Request) (raw [][16]byte, at uint64, cc *compactCall) {
	t.Helper()
	at, err := s.instant(ctx, req)
	if err != nil {
		t.Fatalf("instant: %v", err)
	}
	raw = requestTags(req)
	if cc = s.compactDecide(req, raw, at); cc == nil {
		t.Fatalf("no compact call for %+v", req)
	}
	return raw, at, cc
}

// mustRate is a rate; a rapid case (rt) that draws an invalid one is
// skipped, a test's (rt nil) panics.
func mustRate(rt *rapid.T, n int64, per time.Duration) bucket.Rate {
	r, err := bucket.NewRate(n, per)
	if err != nil {
		if rt == nil {
			panic(err)
		}
		rt.Skip(err)
	}
	return r
}

// TestBucketKey: a bucket's key is the prefix, then its tag in hex in
// braces.
func TestBucketKey(t *testing.T) {
	s := &Store{opts: Options{KeyPrefix: "tg:"}}
	for _, k := range []string{"", "a", "user=1|path=/"} {
		if raw, want := s.bucketKey(tagBytes(k)), "tg:{"+tag(k)+"}"; raw != want {
			t.Errorf("%q: %q, want %q", k, raw, want)
		}
	}
}
