package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
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

// sameNode are n keys in distinct slots served by the node of key from's
// slot (by the store's map of the nodes).
func sameNode(t *testing.T, s *Store, from string, n int) []string {
	t.Helper()
	m := s.nodes.m.Load()
	slot := func(k string) uint16 { return keySlot(s.bucketKey(tagBytes(k))) }
	keys, slots := []string{from}, map[uint16]bool{slot(from): true}
	for i := 0; len(keys) < n; i++ {
		k := from + "-" + strconv.Itoa(i)
		if m.of[slot(k)] == m.of[slot(from)] && !slots[slot(k)] {
			keys, slots[slot(k)] = append(keys, k), true
		}
	}
	return keys
}

// decideCosts decides a request of keys at costs, and returns whether it
// was allowed, its results and the tokens each bucket has left.
func decideCosts(t *testing.T, s *Store, v *bucket.Version, keys []string, costs []int64) (bool, []store.Result, []int64) {
	t.Helper()
	items := make([]store.Item, len(keys))
	for i, k := range keys {
		items[i] = store.Item{Key: k, Version: v, Cost: costs[i]}
	}
	res := make([]store.Result, len(items))
	out, err := s.Decide(context.Background(), &store.Request{Items: items}, res)
	if err != nil {
		t.Fatal(err)
	}
	left := make([]int64, len(res))
	for i := range res {
		left[i] = res[i].Remaining
	}
	return out.Allowed, res, left
}

// TestOneNodeRequest: a request whose buckets are in several slots of one
// node is one call, all or nothing, without reserve and settle.
func TestOneNodeRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl, s := clusterStore(t, Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	keys := sameNode(t, s, "one", 3)
	decide := func(costs ...int64) (bool, []store.Result) {
		ok, res, _ := decideCosts(t, s, v, keys, costs)
		return ok, res
	}
	before := clusterCalls(t, cl)
	if ok, res := decide(2, 3, 4); !ok || res[0].Remaining != 8 || res[1].Remaining != 7 || res[2].Remaining != 6 {
		t.Fatalf("allowed %v, %+v; want allowed, 8, 7, 6 left", ok, res)
	}
	// One bucket cannot afford it: nothing is charged.
	if ok, _ := decide(1, 1, 7); ok {
		t.Fatal("a request one bucket cannot afford was allowed")
	}
	if ok, res := decide(0, 0, 0); !ok || res[0].Remaining != 8 || res[1].Remaining != 7 || res[2].Remaining != 6 {
		t.Fatalf("after a rejection: allowed %v, %+v; want 8, 7, 6 left", ok, res)
	}
	if calls := clusterCalls(t, cl) - before; calls != 3 {
		t.Errorf("3 requests ran %d calls, want 3", calls)
	}
	if n := testutil.ToFloat64(s.metrics.crossSlot); n != 0 {
		t.Errorf("%v requests went by reserve and settle", n)
	}
}

// TestNodeReserves: a request of two nodes is a reserve per node (one of
// two slots on the first), all or nothing: rejected on one node, what it
// reserved on the other is rolled back, a settle per slot. Without a
// request id each reserve is a compact call that the lean path decides.
func TestNodeReserves(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl, s := clusterStore(t, Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	keys := sameNode(t, s, "r", 2)
	m := s.nodes.m.Load()
	for i := 0; len(keys) < 3; i++ {
		if k := "other-" + strconv.Itoa(i); m.of[keySlot(s.bucketKey(tagBytes(k)))] != m.of[keySlot(s.bucketKey(tagBytes(keys[0])))] {
			keys = append(keys, k)
		}
	}
	decide := func(costs ...int64) (bool, []int64) {
		ok, _, left := decideCosts(t, s, v, keys, costs)
		return ok, left
	}
	before := clusterCalls(t, cl)
	if ok, left := decide(1, 2, 3); !ok || !slices.Equal(left, []int64{9, 8, 7}) {
		t.Fatalf("allowed %v, %v left; want allowed, 9 8 7", ok, left)
	}
	if calls := clusterCalls(t, cl) - before; calls != 2 {
		t.Errorf("a request of two nodes ran %d calls, want a reserve on each: 2", calls)
	}
	before = clusterCalls(t, cl)
	rollbacks := s.metrics.settles.WithLabelValues("rollback", "ok")
	rolled := testutil.ToFloat64(rollbacks)
	if ok, _ := decide(1, 1, 8); ok {
		t.Fatal("a request the other node's bucket cannot afford was allowed")
	}
	if n := testutil.ToFloat64(rollbacks) - rolled; n != 2 {
		t.Errorf("a rejected request of two nodes rolled back %v slots, want the two its node's reserve charged", n)
	}
	// The two rollbacks go to one node's batcher: one call each, or one
	// for both when they queue behind a call still in flight.
	if calls := clusterCalls(t, cl) - before; calls != 3 && calls != 4 {
		t.Errorf("a rejected request of two nodes ran %d calls, want 2 reserves and the rollbacks in 1 or 2: 3 or 4", calls)
	}
	if ok, left := decide(0, 0, 0); !ok || !slices.Equal(left, []int64{9, 8, 7}) {
		t.Fatalf("after the rollback: %v left, want 9 8 7", left)
	}
	if lean, general := testutil.ToFloat64(s.metrics.lean), testutil.ToFloat64(s.metrics.general); lean != 3 || general != 0 {
		t.Errorf("%v requests decided by the lean path, %v by the general one; want 3 and 0", lean, general)
	}
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
	mates := sameNode(t, s, "hot", callers+1)[1:]
	before := clusterCalls(t, cl)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := "own-" + strconv.Itoa(g)
			for i := range each {
				// Every third caller asks for the hot bucket with its own
				// of another slot of the hot bucket's node: one call.
				items := []store.Item{{Key: own, Version: v, Cost: 1}}
				if i%2 == 0 {
					items[0].Key = "hot"
					if g%3 == 0 {
						items = append(items, store.Item{Key: mates[g], Version: v, Cost: 1})
					}
				}
				out, err := s.Decide(context.Background(), &store.Request{Items: items}, make([]store.Result, len(items)))
				if err != nil {
					t.Error(err)
					return
				}
				if out.Allowed && items[0].Key == "hot" {
					hot[g]++
				} else if !out.Allowed && items[0].Key == own {
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
	for g := 0; g < callers; g += 3 {
		res := make([]store.Result, 1)
		if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: mates[g], Version: v, Cost: 0}}}, res); err != nil {
			t.Fatal(err)
		}
		if want := int64(500 - hot[g]); res[0].Remaining != want {
			t.Errorf("caller %d: its bucket beside the hot one holds %d tokens after %d allowed requests, want %d", g, res[0].Remaining, hot[g], want)
		}
	}
	if n := testutil.ToFloat64(s.metrics.crossSlot); n != 0 {
		t.Errorf("%v requests of one node went by reserve and settle", n)
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
// request of one slot, or of several slots of one node, times out and,
// refused, is refunded when its late answer comes, as on one node; a
// request of several nodes' slots fails and whatever its reserves charged
// late is rolled back. Either way the buckets end full.
func TestClusterAmbiguous(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl, s := clusterStore(t, Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	m := s.nodes.m.Load()
	node := func(k string) *node { return m.of[keySlot(s.bucketKey(tagBytes(k)))] }
	if node("x") == node("y") && node("y") == node("z") {
		t.Fatal("x, y and z share a node")
	}
	for _, keys := range [][]string{{"a"}, {"x", "y", "z"}, sameNode(t, s, "m", 3)} {
		items := make([]store.Item, len(keys))
		for i, k := range keys {
			items[i] = store.Item{Key: k, Version: v, Cost: 4}
		}
		for _, k := range keys { // the buckets exist
			if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: k, Version: v, Cost: 0}}}, make([]store.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// Held until the call is out past its deadline, then resumed, well
		// within the call's late wait.
		resume := pauseWrites(t, cl.Addrs()...)
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
		_, err := s.Decide(ctx, &store.Request{Items: items}, make([]store.Result, len(items)))
		cancel()
		resume()
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

// TestPerMaster: calls in flight are shared out among a Cluster's
// masters, at least one each, and 0 keeps batching off; a store on three
// masters has one call in flight to each by default.
func TestPerMaster(t *testing.T) {
	for _, c := range []struct {
		inFlight      *int
		masters, want int
	}{{nil, 1, 2}, {nil, 3, 1}, {new(0), 3, 0}, {new(6), 3, 2}, {new(5), 2, 2}, {new(2), 4, 1}, {new(1), 0, 1}} {
		if got := *perMaster(c.inFlight, c.masters); got != c.want {
			t.Errorf("%v in flight on %d masters: %d each, want %d", c.inFlight, c.masters, got, c.want)
		}
	}
	_, s := clusterStore(t, Options{Registerer: prometheus.NewRegistry()})
	seen := map[*node]bool{}
	for _, nd := range s.nodes.m.Load().of {
		if !seen[nd] {
			seen[nd] = true
			if nd.batch.maxInFlight != 1 {
				t.Errorf("node %s: %d calls in flight, want 1", nd.addr, nd.batch.maxInFlight)
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d masters, want 3", len(seen))
	}
}

// TestCallOnFollowsRedirects: a call sent through a node that does not
// serve its keys (a map of the nodes gone stale) is answered MOVED and
// goes again through the cluster client, which follows it: the request
// is decided once.
func TestCallOnFollowsRedirects(t *testing.T) {
	_, s := clusterStore(t, Options{Registerer: prometheus.NewRegistry(), DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/h")
	req := &store.Request{Items: []store.Item{{Key: "moved", Version: v, Cost: 3}}}
	raw := requestTags(req)
	at, err := s.instant(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	keys, args := s.decideArgs(req, raw, strconv.FormatUint(at, 10))
	owner := s.nodes.m.Load().of[keySlot(keys[0])]
	var wrong rueidis.Client
	for addr, c := range s.client.Nodes() {
		if addr != owner.addr {
			wrong = c
			break
		}
	}
	msgs, err := s.callOn(context.Background(), wrong, keys, args)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]itemRecord, 1)
	r, err := s.decodeReply(msgs, items)
	if err != nil || !r.allowed || items[0].res.Remaining != 7 {
		t.Fatalf("allowed %v, %+v, %v; want allowed, 7 left", r.allowed, items[0].res, err)
	}
	_, _, left := decideCosts(t, s, v, []string{"moved"}, []int64{0})
	if left[0] != 7 {
		t.Errorf("%d left after one call, want 7: decided once", left[0])
	}
}
