package redis

import (
	"context"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// testTimeout is generous: tests run with -race on a small shared machine.
const testTimeout = 2 * time.Second

func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("redis client for %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// pauseWrites holds the writes of the Redis servers at addrs (an FCALL is
// one) for up to 20 s, far past any stall of a loaded machine, and
// returns what lifts the pause (CLIENT UNPAUSE), which the test's end
// runs too. A pause of a fixed time can run out before the call it is to
// hold was sent, on a machine running tests in parallel; and pausing
// writes, not all commands, leaves CLIENT UNPAUSE free to run.
func pauseWrites(t testing.TB, addrs ...string) (resume func()) {
	t.Helper()
	for _, a := range addrs {
		if _, err := redistest.Do(a, "CLIENT", "PAUSE", "20000", "WRITE"); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, a := range addrs {
				if _, err := redistest.Do(a, "CLIENT", "UNPAUSE"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// tag is a bucket key's hash tag, as the store writes it.
func tag(key string) string {
	t := tagBytes(key)
	return hex.EncodeToString(t[:])
}

func newStore(t testing.TB, c rueidis.Client, opts Options) *Store {
	t.Helper()
	opts.Client = c
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOptionsOff: each feature that can be off is on when its option is
// nil, off at 0, and a negative value is refused.
func TestOptionsOff(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	s := newStore(t, c, Options{})
	if s.admit == nil || s.batch == nil || s.deny == nil {
		t.Fatalf("defaults: admission %v, batching %v, deny cache %v; want each on", s.admit != nil, s.batch != nil, s.deny != nil)
	}
	if s := newStore(t, c, Options{RequestTime: true}); s.deny != nil {
		t.Fatal("the deny cache is on by default with RequestTime")
	}
	s = newStore(t, c, Options{Admission: AdmissionOptions{Budget: new(0)}, Batch: BatchOptions{MaxInFlight: new(0)}, DenyCacheBytes: new(0)})
	if s.admit != nil || s.batch != nil || s.deny != nil {
		t.Fatalf("at 0: admission %v, batching %v, deny cache %v; want each off", s.admit != nil, s.batch != nil, s.deny != nil)
	}
	for name, o := range map[string]Options{
		"Admission.Budget":  {Admission: AdmissionOptions{Budget: new(-1)}},
		"Batch.MaxInFlight": {Batch: BatchOptions{MaxInFlight: new(-1)}},
		"DenyCacheBytes":    {DenyCacheBytes: new(-1)},
		"Breaker.Window":    {Breaker: BreakerOptions{Window: new(-time.Millisecond)}},
	} {
		o.Client = c
		if _, err := New(o); err == nil {
			t.Errorf("%s < 0 accepted", name)
		}
	}
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		// A fresh prefix per store: each starts empty.
		return newStore(t, c, Options{RequestTime: true, KeyPrefix: "t" + time.Now().Format("150405.000000000") + ":"})
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newClient(t, cl.Addrs()...)
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %s, want cluster", c.Mode())
	}
	// Batched, a request of one node is one call; unbatched, of one slot.
	for name, inFlight := range map[string]*int{"batched": nil, "unbatched": new(0)} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				return newStore(t, c, Options{RequestTime: true, Batch: BatchOptions{MaxInFlight: inFlight}, KeyPrefix: "t" + time.Now().Format("150405.000000000") + ":"})
			})
		})
	}
}

// TestCollector: the store's metrics are one collector, registered whole
// by Options.Registerer or on its own.
func TestCollector(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s.Collector()); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "tokengate_redis_keys", "tokengate_redis_ambiguous_total", "tokengate_redis_circuit_open")
	if err != nil || n != 1+5+1 {
		t.Fatalf("gathered %d series (%v), want 7", n, err)
	}
}

// TestPrepare: a prepared store's first decision is its one FCALL: the
// library is loaded and the shared clock anchored before.
func TestPrepare(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{})
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := commandStats(t, srv.Addr())
	v := storetest.Version(t, 1, 10, "1/s")
	if _, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1)); err != nil {
		t.Fatal(err)
	}
	after := commandStats(t, srv.Addr())
	// The decision's own commands, ours (info), and a connection's set-up:
	// the client may dial another connection for the call.
	allowed := map[string]bool{"fcall": true, "mget": true, "set": true, "info": true, "hello": true, "ping": true, "client|setinfo": true}
	for cmd, n := range after {
		if d := n - before[cmd]; d != 0 && !allowed[cmd] {
			t.Errorf("the first decision after Prepare ran %d %s", d, cmd)
		}
	}
	if d := after["fcall"] - before["fcall"]; d != 1 {
		t.Errorf("the first decision ran %d FCALLs, want 1", d)
	}
}

// TestPostPaidReplayRecords: a request id's record keeps a post-paid
// answer whole, its debt and what it forgave: the script's record of a
// decide (replayed by a repeat), and the one the store writes for a
// cross-slot request (appendRecord), read back by parseRecord.
func TestPostPaidReplayRecords(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{RequestTime: true})
	v := storetest.PostPaidVersion(t, 1, 10, "1/s", 5)
	items := []store.Item{{Key: "a", Version: v, Cost: 30, Charge: store.Report}, {Key: "b", Version: v, Charge: store.Check}}
	var first []store.Result
	for i, want := range []bool{false, true} {
		res := make([]store.Result, len(items))
		out, err := s.Decide(context.Background(), &store.Request{ID: "r", Items: items}, res)
		if err != nil {
			t.Fatal(err)
		}
		if out.Replayed != want || !out.Allowed {
			t.Fatalf("decision %d: %+v", i, out)
		}
		if i == 0 {
			first = res
			if r := res[0].Result; r.Debt != 5 || r.Forgiven != 15 || r.Allowed {
				t.Fatalf("30 reported on 10 with a bound of 5: %+v", r)
			}
			continue
		}
		if res[0] != first[0] || res[1] != first[1] {
			t.Fatalf("replayed %+v, first %+v", res, first)
		}
	}
	results := []store.Result{first[0], first[1], {Result: bucket.Result{Allowed: true, Remaining: 3}, ResetAfter: 7}}
	got := make([]store.Result, len(results))
	allowed, err := parseRecord(string(appendRecord(nil, true, results)), got)
	if err != nil || !allowed || !slices.Equal(got, results) {
		t.Fatalf("record round trip: %v %+v, want %+v", err, got, results)
	}
}
