package memory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

const sec = int64(time.Second)

func decide(t testing.TB, s *Store, now int64, id string, items ...store.Item) store.Outcome {
	t.Helper()
	out, err := s.Decide(context.Background(), &store.Request{Now: now, ID: id, Items: items}, make([]store.Result, len(items)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFullBucketsAreNotStored(t *testing.T) {
	s := New(Options{})
	v := storetest.Version(t, 1, 10, "1/s")
	decide(t, s, 0, "", store.Item{Key: "check", Version: v})
	decide(t, s, 0, "", store.Item{Key: "refund", Version: v, Cost: -1})
	decide(t, s, 0, "", store.Item{Key: "over", Version: v, Cost: 1}, store.Item{Key: "x", Version: v, Cost: 11})
	if n := s.Stats().Buckets; n != 0 {
		t.Fatalf("%d buckets stored, want 0: every bucket was full", n)
	}
	decide(t, s, 0, "", store.Item{Key: "spent", Version: v, Cost: 1})
	if n := s.Stats().Buckets; n != 1 {
		t.Fatalf("%d buckets stored, want 1", n)
	}
}

func TestSweepDropsFullAndRemoved(t *testing.T) {
	s := New(Options{Shards: 4})
	fast := storetest.Version(t, 1, 10, "10/s")
	slow := storetest.Version(t, 2, 10, "1/m")
	gone := storetest.Version(t, 3, 10, "1/m")
	for i := range 30 {
		k := strconv.Itoa(i)
		decide(t, s, 0, "", store.Item{Key: "fast" + k, Version: fast, Cost: 5},
			store.Item{Key: "slow" + k, Version: slow, Cost: 5}, store.Item{Key: "gone" + k, Version: gone, Cost: 5})
	}
	if n := s.Sweep(sec / 4); n != 0 {
		t.Fatalf("swept %d buckets at 0.25s, none is full yet", n)
	}
	gone.Lineage().Remove()
	if n := s.Sweep(sec); n != 60 {
		t.Fatalf("swept %d at 1s, want 60 (30 full at 10/s, 30 of a removed rule)", n)
	}
	st := s.Stats()
	if st.Buckets != 30 || st.Dropped[Full] != 30 || st.Dropped[Removed] != 30 || st.Dropped[Idle] != 0 {
		t.Fatalf("stats after sweep: %+v", st)
	}
	// A bucket that was full under its own version but is not under the
	// rule's current one (capacity raised) carries information: keep it.
	big := fast.Next(4, slow.Params, 2*sec, bucket.Clamp)
	big.Lineage().Publish(big)
	decide(t, s, 2*sec, "", store.Item{Key: "fast0", Version: fast, Cost: 1})
	if n := s.Sweep(2 * sec); n != 0 {
		t.Fatalf("swept %d, want 0", n)
	}
}

func TestSweepForgetsNoCursor(t *testing.T) {
	// A full bucket dropped at cursor 10s: a request reading 4s (behind the
	// cursor) must not get the 6s in between refilled once more.
	s := New(Options{})
	v := storetest.Version(t, 1, 10, "1/s")
	decide(t, s, 0, "", store.Item{Key: "a", Version: v, Cost: 10})
	decide(t, s, 10*sec, "", store.Item{Key: "a", Version: v, Cost: 0})
	if n := s.Sweep(10 * sec); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	decide(t, s, 4*sec, "", store.Item{Key: "a", Version: v, Cost: 10})
	if out := decide(t, s, 10*sec, "", store.Item{Key: "a", Version: v, Cost: 1}); out.Allowed {
		t.Fatal("dropping a full bucket minted the time behind its cursor")
	}
}

func TestEvictionAtCap(t *testing.T) {
	s := New(Options{Shards: 1, MaxBuckets: 100})
	v := storetest.Version(t, 1, 10, "1/h")
	for i := range 150 {
		decide(t, s, int64(i)*sec, "", store.Item{Key: strconv.Itoa(i), Version: v, Cost: 1})
	}
	st := s.Stats()
	if st.Buckets != 100 || st.Dropped[Idle] != 50 {
		t.Fatalf("cap 100 after 150 buckets: %+v", st)
	}
	// The request's own buckets are never evicted to make room for another
	// of its buckets.
	decide(t, s, 200*sec, "", store.Item{Key: "x", Version: v, Cost: 1}, store.Item{Key: "y", Version: v, Cost: 1})
	res := make([]store.Result, 2)
	if _, err := s.Decide(context.Background(), &store.Request{Now: 200 * sec, Items: []store.Item{{Key: "x", Version: v}, {Key: "y", Version: v}}}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 9 || res[1].Remaining != 9 {
		t.Fatalf("x and y: %+v", res)
	}
	// Full buckets go first, at no cost.
	fast := storetest.Version(t, 2, 10, "10/s")
	s = New(Options{Shards: 1, MaxBuckets: 10, EvictionSample: 64})
	for i := range 10 {
		decide(t, s, 0, "", store.Item{Key: "f" + strconv.Itoa(i), Version: fast, Cost: 1})
	}
	decide(t, s, 10*sec, "", store.Item{Key: "new", Version: v, Cost: 1})
	if st := s.Stats(); st.Dropped[Full] != 1 || st.Dropped[Idle] != 0 {
		t.Fatalf("full bucket should have been the victim: %+v", st)
	}
}

func TestReplayWindowAndBound(t *testing.T) {
	s := New(Options{ReplayWindow: time.Second, MaxRequestIDs: 64})
	v := storetest.Version(t, 1, 1000, "1/h")
	a := store.Item{Key: "a", Version: v, Cost: 1}
	decide(t, s, 0, "id", a)
	if out := decide(t, s, sec-1, "id", a); !out.Replayed {
		t.Fatal("repeat within the window was not replayed")
	}
	if out := decide(t, s, sec, "id", a); out.Replayed {
		t.Fatal("repeat after the window was replayed")
	}
	for i := range 10_000 {
		decide(t, s, 2*sec, "flood"+strconv.Itoa(i), a)
	}
	st := s.Stats()
	if st.RequestIDs > 64 || st.IDsForgotten < 10_000-64 || st.Replays != 1 {
		t.Fatalf("10,000 ids into a table of 64: %+v", st)
	}
}

// TestLockWaitIsCounted: a Decide that waits for a shard's lock counts
// the wait, timed on the store's clock: the test holds the lock, moves the
// clock 20ms once the waiter has read it, then lets go.
func TestLockWaitIsCounted(t *testing.T) {
	clk := &readClock{read: make(chan struct{}, 2)}
	s := New(Options{Shards: 1, Clock: clk})
	v := storetest.Version(t, 1, 1, "1/s")
	s.shards[0].mu.Lock()
	done := make(chan error)
	go func() {
		_, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
		done <- err
	}()
	<-clk.read // the waiter found the lock taken and started timing
	clk.Add(20 * time.Millisecond)
	s.shards[0].mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Contended != 1 || st.LockWait != 20*time.Millisecond {
		t.Fatalf("a 20ms wait: %+v", st)
	}
}

// readClock is a clock.Fake that says on read when it was read.
type readClock struct {
	clock.Fake
	read chan struct{}
}

func (c *readClock) Now() int64 {
	select {
	case c.read <- struct{}{}:
	default:
	}
	return c.Fake.Now()
}

// TestSweepForgetsUnusedVersions: a shard refers to versions by number;
// once no bucket uses a version the sweep forgets it, and the numbers of
// the others stay right.
func TestSweepForgetsUnusedVersions(t *testing.T) {
	s := New(Options{Shards: 1})
	vs := []*bucket.Version{storetest.Version(t, 1, 10, "1/h"), storetest.Version(t, 2, 10, "1/h"), storetest.Version(t, 3, 10, "1/h")}
	for i, v := range vs {
		decide(t, s, 0, "", store.Item{Key: strconv.Itoa(i), Version: v, Cost: 1 + int64(i)})
	}
	vs[0].Lineage().Remove()
	s.Sweep(sec)
	if n := len(s.shards[0].versions); n != 2 {
		t.Fatalf("%d versions kept, want 2", n)
	}
	for i, v := range vs[1:] {
		res := make([]store.Result, 1)
		if _, err := s.Decide(context.Background(), &store.Request{Now: sec, Items: []store.Item{{Key: strconv.Itoa(i + 1), Version: v}}}, res); err != nil || res[0].Remaining != 10-2-int64(i) {
			t.Fatalf("bucket %d after the sweep: %+v %v", i+1, res[0], err)
		}
	}
}
