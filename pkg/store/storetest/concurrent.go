package storetest

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/store"
)

// testConcurrent hammers a few hot buckets and many cold ones from several
// goroutines with multi-bucket requests in random key order, while a shared
// clock advances. No hot bucket may allow more than capacity plus the refill
// over the elapsed time, and no request may deadlock.
func testConcurrent(t *testing.T, s store.Store) {
	const (
		workers   = 8
		perWorker = 1500
		capacity  = 500
		hot       = 3
	)
	v := Version(t, 1, capacity, "1000/s") // 1 token per ms
	hotKeys := [hot]string{"hot-0", "hot-1", "hot-2"}
	var now atomic.Int64
	var allowed [hot]atomic.Int64

	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			items := make([]store.Item, 0, hot+1)
			for range perWorker {
				items = items[:0]
				for _, h := range rng.Perm(hot)[:1+rng.IntN(hot)] {
					items = append(items, store.Item{Key: hotKeys[h], Version: v, Cost: 1 + rng.Int64N(3)})
				}
				cold := store.Item{Key: "cold-" + string(rune('a'+rng.IntN(26))) + string(rune('a'+rng.IntN(26))), Version: v, Cost: 1}
				items = append(items, cold)
				rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
				// Each request moves the clock by 10us: 0.01 token.
				out, _ := call(t, s, now.Add(10_000), "", items...)
				if out.Allowed {
					for _, it := range items {
						for h := range hotKeys {
							if it.Key == hotKeys[h] {
								allowed[h].Add(it.Cost)
							}
						}
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("deadlock: workers did not finish in 2 minutes")
	}
	limit := capacity + now.Load()/int64(time.Millisecond)
	for h := range hotKeys {
		if got := allowed[h].Load(); got > limit || got == 0 {
			t.Errorf("%s: allowed %d, at most %d (capacity + refill), at least 1", hotKeys[h], got, limit)
		}
	}
}
