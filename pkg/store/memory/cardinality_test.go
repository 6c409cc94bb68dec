//go:build !race

// The race detector makes this 2-million-request test ten times slower and
// it runs on one goroutine, so it runs without -race (make test runs it).

package memory

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestCardinalityBounded sends 2 million distinct keys into a store capped
// at 100k buckets: the store holds 100k and the heap stays bounded.
func TestCardinalityBounded(t *testing.T) {
	s := New(Options{MaxBuckets: 100_000})
	v := storetest.Version(t, 1, 10, "1/h")
	item := []store.Item{{Version: v, Cost: 1}}
	res := make([]store.Result, 1)
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	peak := uint64(0)
	for i := range 2_000_000 {
		item[0].Key = "attacker-" + strconv.Itoa(i)
		if _, err := s.Decide(context.Background(), &store.Request{Now: int64(i), Items: item}, res); err != nil {
			t.Fatal(err)
		}
		if i%500_000 == 499_999 {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc-base.HeapAlloc)
		}
	}
	st := s.Stats()
	if st.Buckets > 100_000 || st.Dropped[Idle] < 1_900_000 {
		t.Fatalf("after 2M keys: %+v", st)
	}
	if peak > 40<<20 {
		t.Fatalf("heap grew by %d MiB for 100k buckets", peak>>20)
	}
	t.Logf("2M keys into a 100k cap: %d buckets, %d evicted, heap +%.1f MiB", st.Buckets, st.Dropped[Idle], float64(peak)/(1<<20))
}
