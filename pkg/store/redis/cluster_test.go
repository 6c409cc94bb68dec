package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// clusterStore is a prepared store on a fresh three-master cluster.
func clusterStore(t *testing.T, opts Options) (*redistest.Cluster, *Store) {
	t.Helper()
	cl := redistest.StartCluster(t)
	s := newStore(t, newClient(t, cl.Addrs()...), opts)
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cl, s
}

// clusterCalls is the number of FCALLs the cluster's masters ran.
func clusterCalls(t *testing.T, cl *redistest.Cluster) int64 {
	var n int64
	for _, node := range cl.Nodes {
		n += commandStatsFull(t, node.Addr())["fcall"][0]
	}
	return n
}

// TestClusterBatchesDecideExactly: on a three-master cluster, 48 callers
// at once, each alternating a request of a shared hot bucket and one of
// its own (every bucket in its own slot, mostly), share calls per node:
// batches happen, Redis runs exactly one call per batch or lone request,
// and every request is decided on its own: the hot bucket's 500 tokens go
// to exactly 500 requests, each caller's bucket is charged exactly.
func TestClusterBatchesDecideExactly(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl, s := clusterStore(t, Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 500, "1/h")
	const callers, each = 48, 30
	hot := make([]int, callers)
	before := clusterCalls(t, cl)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := "own-" + strconv.Itoa(g)
			for i := range each {
				key := own
				if i%2 == 0 {
					key = "hot"
				}
				out, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: 1}}}, make([]store.Result, 1))
				if err != nil {
					t.Error(err)
					return
				}
				if out.Allowed && key == "hot" {
					hot[g]++
				} else if !out.Allowed && key == own {
					t.Errorf("caller %d: its own bucket refused a request", g)
				}
			}
		}()
	}
	wg.Wait()
	calls := clusterCalls(t, cl) - before
	total := 0
	for g := range callers {
		total += hot[g]
		res := make([]store.Result, 1)
		check := &store.Request{Items: []store.Item{{Key: "own-" + strconv.Itoa(g), Version: v, Cost: 0}}}
		if _, err := s.Decide(context.Background(), check, res); err != nil {
			t.Fatal(err)
		}
		if want := int64(500 - each/2); res[0].Remaining != want {
			t.Errorf("caller %d: own bucket holds %d tokens after %d requests, want %d", g, res[0].Remaining, each/2, want)
		}
	}
	if total != 500 {
		t.Errorf("the hot bucket's 500 tokens went to %d requests", total)
	}
	checkBatchCalls(t, s, calls, callers*each)
}

// TestNodeCallSpansSlots: a batch of calls of several slots of one node
// is one node call, decided as the calls alone would be; a batch whose
// keys are on two nodes fails whole, with nothing written, and the map of
// the nodes is read again.
func TestNodeCallSpansSlots(t *testing.T) {
	_, s := clusterStore(t, Options{DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	m := s.nodes.m.Load()
	// Keys by the batcher of their slot's node.
	byNode := map[*node][]string{}
	for i := 0; len(byNode) < 2 || len(byNode[m.of[keySlot(s.bucketKey(tagBytes("k0")))]]) < 3; i++ {
		k := "k" + strconv.Itoa(i)
		b := m.of[keySlot(s.bucketKey(tagBytes(k)))]
		byNode[b] = append(byNode[b], k)
	}
	call := func(key string, cost int64) *queued {
		req := &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: cost}}}
		now, err := s.instant(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		keys, args := s.decideArgs(req, [][16]byte{tagBytes(key)}, strconv.FormatUint(now, 10))
		return &queued{keys: keys, args: args, done: make(chan struct{})}
	}
	left := func(key string) int64 {
		res := make([]store.Result, 1)
		if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: 0}}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	first := m.of[keySlot(s.bucketKey(tagBytes("k0")))]
	same := byNode[first][:3]
	// One key twice: the second call sees the first's charge.
	batch := []*queued{call(same[0], 2), call(same[1], 3), call(same[2], 4), call(same[0], 5)}
	if !spansSlots(batch) {
		t.Fatal("the keys share a slot")
	}
	s.callBatch(context.Background(), batch)
	for i, w := range batch {
		if w.err != nil {
			t.Fatalf("call %d of a node call: %v", i, w.err)
		}
	}
	for key, want := range map[string]int64{same[0]: 3, same[1]: 7, same[2]: 6} {
		if got := left(key); got != want {
			t.Errorf("%s: %d tokens after the node call, want %d", key, got, want)
		}
	}
	var other string
	for b, keys := range byNode {
		if b != first {
			other = keys[0]
		}
	}
	next := s.nodes.next.Load()
	mixed := []*queued{call(same[1], 1), call(other, 1)}
	s.callBatch(context.Background(), mixed)
	for i, w := range mixed {
		if w.err == nil {
			t.Errorf("call %d of a batch on two nodes: no error", i)
		}
	}
	if left(same[1]) != 7 || left(other) != 10 {
		t.Errorf("a failed batch wrote: %d and %d tokens, want 7 and 10", left(same[1]), left(other))
	}
	poll.Eventually(t, 5*time.Second, func() bool { return s.nodes.next.Load() != next }, "the nodes' map read again")
}

// TestClusterAmbiguous: with every master paused while calls are out, a
// request of one slot times out and, refused, is refunded when its late
// answer comes, as on one node; a request of several slots fails and
// whatever its reserves charged late is rolled back. Either way the
// buckets end full.
func TestClusterAmbiguous(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl, s := clusterStore(t, Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	for _, keys := range [][]string{{"a"}, {"x", "y", "z"}} {
		items := make([]store.Item, len(keys))
		for i, k := range keys {
			items[i] = store.Item{Key: k, Version: v, Cost: 4}
		}
		for _, k := range keys { // the buckets exist
			if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: k, Version: v, Cost: 0}}}, make([]store.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range cl.Nodes {
			if _, err := redistest.Do(n.Addr(), "CLIENT", "PAUSE", "120", "ALL"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
		_, err := s.Decide(ctx, &store.Request{Items: items}, make([]store.Result, len(items)))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v: a call out when its deadline passed: %v, want a timeout", keys, err)
		}
		var amb store.Ambiguous
		if errors.As(err, &amb) {
			amb.Resolve(false)
		}
		poll.Eventually(t, 5*time.Second, func() bool {
			return testutil.ToFloat64(s.metrics.ambiguous.WithLabelValues("refunded")) > 0
		}, "a refund")
		s.metrics.ambiguous.Reset()
		poll.Eventually(t, 5*time.Second, func() error {
			for _, k := range keys {
				res := make([]store.Result, 1)
				if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: k, Version: v, Cost: 0}}}, res); err != nil {
					return err
				}
				if res[0].Remaining != 10 {
					return errors.New(k + ": " + strconv.FormatInt(res[0].Remaining, 10) + " tokens, want 10")
				}
			}
			return nil
		}, "every bucket full again")
	}
}
