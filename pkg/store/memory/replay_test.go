package memory

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestReplayIDsOfAnyLength: an id of any length, the service's 16-byte
// hash or a caller's own, replays a repeat of its request, and only that.
func TestReplayIDsOfAnyLength(t *testing.T) {
	for name, id := range map[string]string{
		"short":    "a",
		"16 bytes": "0123456789abcdef",
		"1 MB":     strings.Repeat("x", 1_000_000),
	} {
		t.Run(name, func(t *testing.T) {
			s := New(Options{ReplayWindow: time.Second})
			v := storetest.Version(t, 1, 10, "1/h")
			a := store.Item{Key: "a", Version: v, Cost: 1}
			if out := decide(t, s, 0, id, a); out.Replayed || !out.Allowed {
				t.Fatalf("first: %+v", out)
			}
			if out := decide(t, s, 1, id, a); !out.Replayed {
				t.Fatal("same id, same request: not replayed")
			}
			if out := decide(t, s, 2, id+"!", a); out.Replayed {
				t.Fatal("another id replayed")
			}
			if out := decide(t, s, 3, id, store.Item{Key: "a", Version: v, Cost: 2}); out.Replayed {
				t.Fatal("same id, another cost: replayed")
			}
			res := make([]store.Result, 1)
			if _, err := s.Decide(t.Context(), &store.Request{Now: 4, Items: []store.Item{{Key: "a", Version: v}}}, res); err != nil || res[0].Remaining != 10-1-1-2 {
				t.Fatalf("charged %d, want 4 (the replay free): %v", 10-res[0].Remaining, err)
			}
		})
	}
}

// TestReplayKeepsNoIDBytes: 200 requests with 64 KiB ids (12.5 MiB if the
// ids were kept) leave less than 1 MiB on the heap, all remembered.
func TestReplayKeepsNoIDBytes(t *testing.T) {
	s := New(Options{ReplayWindow: time.Hour})
	v := storetest.Version(t, 1, 1000, "1/h")
	a := store.Item{Key: "a", Version: v, Cost: 1}
	before := heapAlloc()
	id := []byte(strings.Repeat("x", 64<<10))
	for i := range 200 {
		copy(id, strconv.Itoa(i)+":")
		decide(t, s, 0, string(id), a)
	}
	grown := int64(heapAlloc()) - int64(before)
	if st := s.Stats(); st.RequestIDs != 200 || grown > 1<<20 {
		t.Fatalf("200 ids of 64 KiB: %d ids held in %d bytes of heap", st.RequestIDs, grown)
	}
	runtime.KeepAlive(s)
}

// TestReplayBytesBound: a table flooded with ids of 1 to 64 items holds
// no more than its byte bound, counted and on the heap, and forgets the
// oldest ids to stay there (counted as early).
func TestReplayBytesBound(t *testing.T) {
	const maxBytes = 2 << 20
	for _, n := range []int{1, 3, 17, 64} {
		t.Run(strconv.Itoa(n)+" items", func(t *testing.T) {
			items := make([]store.Item, n)
			for i := range items {
				items[i] = store.Item{Key: "k" + strconv.Itoa(i), Cost: 1}
			}
			results := make([]store.Result, n)
			decide := func(*store.Request, []store.Result) store.Outcome { return store.Outcome{Allowed: true} }
			r := newReplaysBytes(1_000_000, maxBytes, int64(time.Hour))
			before := heapAlloc()
			fits := maxBytes / entryBytes(n)
			for i := range 3 * fits {
				r.do(&store.Request{Now: 1, ID: "id-" + strconv.Itoa(i), Items: items}, results, decide)
			}
			grown := int64(heapAlloc()) - int64(before)
			counted, ids, early := 0, 0, uint64(0)
			for i := range r.shards {
				sh := &r.shards[i]
				if sh.bytes > r.bytes {
					t.Fatalf("shard %d holds %d bytes, bound %d", i, sh.bytes, r.bytes)
				}
				counted, ids, early = counted+sh.bytes, ids+sh.n, early+sh.early
			}
			t.Logf("%d ids in %d bytes counted, %d on the heap", ids, counted, grown)
			switch {
			case grown > maxBytes:
				t.Errorf("the heap grew by %d bytes, bound %d", grown, maxBytes)
			case ids < fits*3/4 || uint64(ids)+early != uint64(3*fits):
				t.Errorf("%d ids held and %d forgotten of %d, %d fit", ids, early, 3*fits, fits)
			}
			if out := r.do(&store.Request{Now: 1, ID: "id-" + strconv.Itoa(3*fits-1), Items: items}, results, decide); !out.Replayed {
				t.Error("the newest id was forgotten")
			}
			runtime.KeepAlive(r)
		})
	}
}

// heapAlloc is the live heap after a collection.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
