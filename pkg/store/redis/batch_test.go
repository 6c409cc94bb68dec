package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestBatchesDecideExactly: 64 callers at once, each request a shared hot
// bucket and the caller's own, share calls (batches happen, and Redis
// counts exactly one call per batch or lone request), and every request is
// still decided on its own, all or nothing: the hot bucket's 1000 tokens go
// to exactly 1000 requests, and each caller's own bucket is charged exactly
// for its allowed requests.
func TestBatchesDecideExactly(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	s := newStore(t, newClient(t, srv.Addr()), Options{Registerer: reg, DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 1000, "1/h")
	const callers, each = 64, 40
	allowed := make([]int, callers)
	// The first call loads the library: count from the second.
	if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "warm", Version: v, Cost: 1}}}, make([]store.Result, 1)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	before := commandStatsFull(t, srv.Addr())["fcall"][0]
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := "own-" + strconv.Itoa(g)
			for range each {
				req := &store.Request{Items: []store.Item{{Key: "hot", Version: v, Cost: 1}, {Key: own, Version: v, Cost: 1}}}
				res := make([]store.Result, 2)
				out, err := s.Decide(context.Background(), req, res)
				if err != nil {
					t.Error(err)
					return
				}
				if out.Allowed {
					allowed[g]++
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for g := range callers {
		total += allowed[g]
		res := make([]store.Result, 1)
		check := &store.Request{Items: []store.Item{{Key: "own-" + strconv.Itoa(g), Version: v, Cost: 0}}}
		if _, err := s.Decide(context.Background(), check, res); err != nil {
			t.Fatal(err)
		}
		if want := int64(1000 - allowed[g]); res[0].Remaining != want {
			t.Errorf("caller %d: own bucket holds %d tokens after %d allowed requests, want %d", g, res[0].Remaining, allowed[g], want)
		}
	}
	if total != 1000 {
		t.Errorf("the hot bucket's 1000 tokens went to %d requests", total)
	}
	checkBatchCalls(t, s, commandStatsFull(t, srv.Addr())["fcall"][0]-before, callers*each+callers)
}

// checkBatchCalls: requests made batches, and Redis ran calls, exactly
// one per batch or lone request.
func checkBatchCalls(t *testing.T, s *Store, calls int64, requests int) {
	t.Helper()
	batches, batched := testutil.ToFloat64(s.metrics.batches), testutil.ToFloat64(s.metrics.batched)
	if batches == 0 {
		t.Fatalf("%d requests at once made no batch", requests)
	}
	if want := float64(requests) - batched + batches; float64(calls) != want {
		t.Errorf("Redis ran %d calls; %d requests, %v of them in %v batches, make %v", calls, requests, batched, batches, want)
	}
	t.Logf("%d requests in %d calls (%v batches, %.1f requests each)", requests, calls, batches, batched/batches)
}

// TestBatchCallErrorsStayTheirs: a call of a batch that fails (an error
// reply, or a Lua error the script catches) fails alone; the others in the
// batch are decided.
func TestBatchCallErrorsStayTheirs(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{DenyCacheBytes: new(0)})
	v := storetest.Version(t, 1, 10, "1/s")
	good := func(key string) *queued {
		req := &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: 3}}}
		now, err := s.instant(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		keys, args := s.decideArgs(req, [][16]byte{tagBytes(key)}, strconv.FormatUint(now, 10))
		return &queued{keys: keys, args: args, done: make(chan struct{})}
	}
	unknownOp := good("k")
	unknownOp.args[argOp-1] = "x"
	luaError := good("c")
	luaError.args[argItems-1] = "not a number"
	batch := []*queued{good("a"), unknownOp, good("b"), luaError}
	s.batch.inFlight = 1 // send frees a place when done
	s.batch.send(batch)
	for i, w := range batch {
		<-w.done
		switch i {
		case 1, 3:
			if w.err == nil {
				t.Errorf("call %d: no error", i)
			}
			continue
		}
		if w.err != nil {
			t.Fatalf("call %d: %v", i, w.err)
		}
		items := make([]itemRecord, 1)
		r, err := decodeReply(w.reply, items)
		if err != nil || !r.allowed || items[0].res.Remaining != 7 {
			t.Errorf("call %d: allowed %v, remaining %d, %v; want allowed with 7 left", i, r.allowed, items[0].res.Remaining, err)
		}
	}
	if !strings.Contains(unknownOp.err.Error(), "unknown operation") {
		t.Errorf("unknown operation answered %v", unknownOp.err)
	}
}

// TestQueuedPastDeadlineIsNotSent: with the one place in flight held (Redis
// paused), a request whose deadline passes while queued fails as never
// sent (errQueued, not a breaker failure) and nothing of it is charged.
func TestQueuedPastDeadlineIsNotSent(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	// The held call's timeout is longer than the pause, which is longer
	// than any stall of a loaded machine: it is lifted (CLIENT UNPAUSE) once
	// the queued request has given up.
	s := newStore(t, newClient(t, srv.Addr()), Options{Registerer: reg, DenyCacheBytes: new(0), Batch: BatchOptions{MaxInFlight: new(1)},
		Timeout: 30 * time.Second,
		Breaker: BreakerOptions{Failures: 1, Window: new(time.Duration(0))}}) // one failure would open the circuit
	v := storetest.Version(t, 1, 10, "1/h")
	decide := func(ctx context.Context, key string) error {
		_, err := s.Decide(ctx, &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: 4}}}, make([]store.Result, 1))
		return err
	}
	// The shared clock anchored and the library loaded first: only the
	// decision itself waits for Redis below.
	if err := decide(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	// Paused until the queued request has given up (a pause of 1.5s ran
	// out before that once, with the race detector and tests in parallel).
	resume := pauseWrites(t, srv.Addr())
	first := make(chan error, 1)
	go func() { first <- decide(context.Background(), "held") }()
	for s.batch.inFlightNow() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := decide(ctx, "queued")
	resume()
	if !errors.Is(err, errQueued) {
		t.Fatalf("queued past its deadline: %v, want errQueued", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if n := testutil.ToFloat64(s.metrics.errors.WithLabelValues("queued")); n != 1 {
		t.Errorf("queued errors counted %v, want 1", n)
	}
	if _, open := s.breaker.OpenFor(); open {
		t.Error("the breaker counted a failure")
	}
	if out, err := redistest.Do(srv.Addr(), "EXISTS", s.bucketKey(tagBytes("queued"))); err != nil || out != "0" {
		t.Errorf("the queued request's bucket exists (%q, %v): it was charged", out, err)
	}
	if out, err := redistest.Do(srv.Addr(), "EXISTS", s.bucketKey(tagBytes("held"))); err != nil || out != "1" {
		t.Errorf("the held request's bucket: EXISTS %q, %v", out, err)
	}
}

func (b *batcher) inFlightNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// TestBatchWithSharesCalls: a store made BatchWith another (a candidate
// policy's) sends its calls in the other's batches, and each store still
// decides exactly on its own buckets.
func TestBatchWithSharesCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	live := newStore(t, c, Options{Registerer: prometheus.NewRegistry(), DenyCacheBytes: new(0)})
	cand := newStore(t, c, Options{KeyPrefix: "tokengate:candidate:", DenyCacheBytes: new(0), BatchWith: live})
	v := storetest.Version(t, 1, 500, "1/h")
	stores := []*Store{live, cand}
	for _, s := range stores { // each anchors its clock
		if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "warm", Version: v, Cost: 1}}}, make([]store.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	before := commandStatsFull(t, srv.Addr())["fcall"][0]
	const callers, each = 32, 40
	var allowed [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				i := (g + k) % 2
				out, err := stores[i].Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "hot", Version: v, Cost: 1}}}, make([]store.Result, 1))
				if err != nil {
					t.Error(err)
					return
				}
				if out.Allowed {
					allowed[i].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if a, b := allowed[0].Load(), allowed[1].Load(); a != 500 || b != 500 {
		t.Errorf("each store's 500 tokens went to %d and %d requests", a, b)
	}
	calls := commandStatsFull(t, srv.Addr())["fcall"][0] - before
	batches, batched := testutil.ToFloat64(live.metrics.batches), testutil.ToFloat64(live.metrics.batched)
	if want := callers*each - batched + batches; batches == 0 || float64(calls) != want {
		t.Errorf("Redis ran %d calls for %d requests of both stores; the live store's batches (%v, of %v requests) account for %v", calls, callers*each, batches, batched, want)
	}
}

// TestAnsweredPastDeadline: a request whose answer came in while it
// waited for a CPU past its deadline gets that answer, never a timeout,
// however often it is asked (with both ready, select picks either).
func TestAnsweredPastDeadline(t *testing.T) {
	b := &batcher{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		w := &queued{done: make(chan struct{}), taken: true}
		close(w.done)
		if got, err := b.wait(ctx, w); err != nil || got != w {
			t.Fatalf("try %d: an answered call past its deadline: %v", i, err)
		}
	}
}
