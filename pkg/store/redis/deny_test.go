package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestDenyCacheAnswersAsRedis: one replica with the deny cache and one
// without see the same random requests (several buckets, charges, checks,
// refunds, a post-paid rule's checks and reports, time standing or moving
// on): every answer is identical, and the cache answered some of them.
func TestDenyCacheAnswersAsRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	v := storetest.Version(t, 1, 5, "2/s")
	w := storetest.PostPaidVersion(t, 2, 3, "1/s", 4)
	seq := 0
	var hits float64
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		cached := newStore(t, c, Options{RequestTime: true, KeyPrefix: fmt.Sprintf("c%d:", seq), DenyCacheBytes: new(1 << 20), DenyCacheAge: time.Hour})
		plain := newStore(t, c, Options{RequestTime: true, KeyPrefix: fmt.Sprintf("p%d:", seq), DenyCacheBytes: new(0)})
		now := int64(0)
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			now += rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "dt")
			n := rapid.IntRange(1, 3).Draw(rt, "items")
			items := make([]store.Item, n)
			for i := range items {
				ver := v
				if rapid.Bool().Draw(rt, "w") {
					ver = w
				}
				items[i] = store.Item{Key: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key") + ver.Params.Rate().String(),
					Version: ver, Cost: rapid.Int64Range(-2, 6).Draw(rt, "cost")}
				if ver == w {
					items[i].Charge = store.Charge(rapid.IntRange(0, 2).Draw(rt, "charge"))
					if items[i].Charge == store.Check {
						items[i].Cost = 0
					}
				}
			}
			got, want := make([]store.Result, n), make([]store.Result, n)
			og, err := cached.Decide(context.Background(), &store.Request{Now: now, Items: items}, got)
			if err != nil {
				rt.Fatal(err)
			}
			ow, err := plain.Decide(context.Background(), &store.Request{Now: now, Items: items}, want)
			if err != nil {
				rt.Fatal(err)
			}
			if og != ow || fmt.Sprint(got) != fmt.Sprint(want) {
				rt.Fatalf("step %d at %d, %+v: with the cache %v %+v, without %v %+v", step, now, items, og, got, ow, want)
			}
		}
		hits += testutil.ToFloat64(cached.metrics.denyHits)
	})
	if hits == 0 {
		t.Fatal("the deny cache answered nothing")
	}
}

// TestDenyCacheBound: a refund sent through another replica is not seen by
// a replica that cached the rejection until its snapshot is too old
// (DenyCacheAge); then it asks Redis again. A new version is never
// answered from an old one's snapshot.
func TestDenyCacheBound(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	a := newStore(t, c, Options{RequestTime: true, DenyCacheBytes: new(1 << 20), DenyCacheAge: time.Second})
	b := newStore(t, c, Options{RequestTime: true})
	v := storetest.Version(t, 1, 4, "1/h")
	item := func(cost int64) store.Item { return store.Item{Key: "k", Version: v, Cost: cost} }
	decide(t, a, 0, item(4))
	if out, _ := decide(t, a, 0, item(1)); out.Allowed {
		t.Fatal("an empty bucket allowed a charge")
	}
	decide(t, b, 1, item(-4)) // the refund, through b
	if out, _ := decide(t, a, int64(time.Second)-1, item(1)); out.Allowed {
		t.Fatal("the cached rejection did not answer within DenyCacheAge")
	}
	if got := testutil.ToFloat64(a.metrics.denyHits); got != 1 {
		t.Fatalf("%v cache hits, want 1", got)
	}
	if out, res := decide(t, a, int64(time.Second), item(1)); !out.Allowed || res[0].Remaining != 3 {
		t.Fatalf("after DenyCacheAge: %v %+v, want Redis's answer (allowed, 3 left)", out, res[0])
	}
	// Drain again (the allowed charge dropped the snapshot, the rejection
	// after it stored one), then a new version of the rule: Redis decides.
	decide(t, a, int64(time.Second), item(3))
	decide(t, a, int64(time.Second), item(1))
	v2 := v.Next(2, storetest.Params(t, 10, "1/h"), int64(time.Second), 1)
	decide(t, a, int64(time.Second), store.Item{Key: "k", Version: v2, Cost: 1})
	if got := testutil.ToFloat64(a.metrics.denyHits); got != 1 {
		t.Fatalf("%v cache hits after a new version, want still 1", got)
	}
}

// TestDenyCacheBytes: the cache holds at most its byte budget.
func TestDenyCacheBytes(t *testing.T) {
	for _, bytes := range []int{0, -1, denyEntryBytes * denyShards, 1 << 20} {
		c := newDenyCache(bytes, 1)
		n := 0
		if c != nil {
			for i := range c.shards {
				n += len(c.shards[i].slots)
			}
		}
		if n*denyEntryBytes > max(bytes, 0) {
			t.Fatalf("%d bytes: %d slots of %d bytes", bytes, n, denyEntryBytes)
		}
		if bytes >= denyEntryBytes*denyShards && n == 0 {
			t.Fatalf("%d bytes: no slot", bytes)
		}
	}
}
