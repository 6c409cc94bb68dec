package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// failoverTimeout is the store's deadline in the failover tests: far
// above the 15ms default, which this small shared machine's scheduling
// alone (and the race detector) exceeds, so that a timeout says a node
// failed (a bound on the machine's speed, not on the store).
const failoverTimeout = time.Second

// failoverRun is what a steady load saw across a master's failure.
type failoverRun struct {
	answers int64
	// Errors for the failed master's keys ([0]) and the others' ([1]),
	// and when the first and last came after the kill.
	errs              [2]int64
	firstErr, lastErr [2]time.Duration
	promoted          time.Duration // when the replica was master, after the kill
	allowed           []atomic.Int64
}

func (r *failoverRun) String() string {
	return fmt.Sprintf("%d answers; %d errors for the failed master's keys, from %v to %v after the kill (the replica master at %v); %d for the others' (from %v to %v)",
		r.answers, r.errs[0], r.firstErr[0].Round(time.Millisecond), r.lastErr[0].Round(time.Millisecond), r.promoted.Round(time.Millisecond),
		r.errs[1], r.firstErr[1].Round(time.Millisecond), r.lastErr[1].Round(time.Millisecond))
}

// failoverCapacity is every bucket's capacity: never reached, so every
// answer but an error is an allowance, and a bucket's balance says
// exactly how many were charged.
const failoverCapacity = 1 << 40

// runFailover loads s with single-bucket requests of keys from workers
// at once, kills a master (kill) after a second and goes on for after,
// noting when replica, the master's, reports itself master; failed says
// whether a key was served by that master. Each error is
// resolved as refused (a store.Ambiguous is refunded), as on_store_error
// deny or local would. Watch runs meanwhile, as in serve.
func runFailover(t *testing.T, s *Store, keys []string, failed func(key string) bool, kill func(), replica *redistest.Server, after time.Duration) *failoverRun {
	v := storetest.Version(t, 1, failoverCapacity, "1/h")
	r := &failoverRun{allowed: make([]atomic.Int64, len(keys))}
	// As serve does: a good ping lets an open circuit probe at once.
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go s.Watch(watch, time.Second)
	var mu sync.Mutex
	start := time.Now()
	var killed atomic.Int64 // ns after start; 0: not yet
	stop := start.Add(time.Second + after)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += 6 {
				k := i % len(keys)
				_, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: keys[k], Version: v, Cost: 1}}}, make([]store.Result, 1))
				at := time.Duration(time.Since(start).Nanoseconds() - killed.Load())
				mu.Lock()
				r.answers++
				switch g := 1; {
				case err == nil:
					r.allowed[k].Add(1)
				case killed.Load() == 0:
					t.Errorf("%s: before the kill: %v", keys[k], err)
				default:
					if failed(keys[k]) {
						g = 0
					}
					if r.errs[g]++; r.errs[g] == 1 {
						r.firstErr[g] = at
					}
					r.lastErr[g] = at
				}
				mu.Unlock()
				var amb store.Ambiguous
				if errors.As(err, &amb) {
					amb.Resolve(false)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	killed.Store(time.Since(start).Nanoseconds())
	kill()
	for time.Now().Before(stop) {
		if info, err := redistest.Do(replica.Addr(), "INFO", "replication"); err == nil && strings.Contains(info, "role:master") {
			r.promoted = time.Duration(time.Since(start).Nanoseconds() - killed.Load())
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	return r
}

// balances checks each key's bucket after the run. On the nodes that
// stayed up it is the capacity less its allowances, less at most the
// charges of calls whose answer never came (ambiguous "unknown": they may
// have run, and stay) in all: every refund landed. The failed master's
// keys may hold more (lost: a charge Redis acknowledged but had not yet
// replicated is lost with the master, as replication is asynchronous) or
// less (kept: a call that ran while its connection broke is a failure,
// and its charge stays), and balances returns both.
func (r *failoverRun) balances(t *testing.T, s *Store, keys []string, failed func(key string) bool) (lost, kept int64) {
	unknown := int64(testutil.ToFloat64(s.metrics.ambiguous.WithLabelValues("unknown")))
	var stayed int64
	v := storetest.Version(t, 1, failoverCapacity, "1/h")
	// Refunds of ambiguous calls land within lateWait and a round trip.
	time.Sleep(lateWait + 2*failoverTimeout)
	for k, key := range keys {
		res := make([]store.Result, 1)
		var err error
		poll.Eventually(t, 10*time.Second, func() bool {
			_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: key, Version: v, Cost: 0}}}, res)
			return err == nil
		}, "a balance read")
		want := failoverCapacity - r.allowed[k].Load()
		switch got := res[0].Remaining; {
		case got <= want && failed(key):
			kept += want - got
		case got <= want:
			stayed += want - got
		case failed(key):
			lost += got - want
		default:
			t.Errorf("%s: %d tokens after %d allowances, want at most %d", key, got, r.allowed[k].Load(), want)
		}
	}
	if stayed > unknown {
		t.Errorf("%d charges more than the allowances on the nodes that stayed up, of %d calls whose answer never came", stayed, unknown)
	}
	return lost, kept
}

// failoverStore is a prepared store on a client dialled as serve does.
func failoverStore(t *testing.T, cfg redisconn.Config) *Store {
	c, err := redisconn.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := newStore(t, c, Options{Timeout: failoverTimeout, DenyCacheBytes: new(0)})
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// recovered checks that the replica took over and that the failed
// master's keys stopped failing within 3s of it (the client's refresh of
// the topology, the breaker's probe after a good ping, a loaded machine).
func (r *failoverRun) recovered(t *testing.T, within time.Duration) {
	t.Helper()
	if r.promoted == 0 {
		t.Fatal("the replica never took over")
	}
	if d := r.lastErr[0] - r.promoted; d > within {
		t.Errorf("the failed master's keys failed until %v after its replica took over, want at most %v", d, within)
	}
}

func failoverKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "fo-" + strconv.Itoa(i)
	}
	return keys
}

// TestClusterFailover: a master of a cluster with replicas is killed under
// steady load. Only its keys' requests fail, and only until its replica
// is promoted, and within a second of that: the store follows the new
// topology by itself, its calls reaching the promoted master as soon as
// its own map of the nodes has it (callOn). No key is
// charged more than its allowances (exactly them on the nodes that stayed
// up), and every refund of a request that timed out lands. The two
// failover tests run beside each other (t.Parallel): most of their time
// is spent waiting for a failure to be detected.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWithReplicas(t)
	s := failoverStore(t, redisconn.Config{Addr: strings.Join(cl.Addrs(), ","), Cluster: true})
	keys := failoverKeys(60)
	victim := cl.Owner(t, s.bucketKey(tagBytes(keys[0])))
	onVictim := map[string]bool{}
	for _, k := range keys {
		onVictim[k] = cl.Owner(t, s.bucketKey(tagBytes(k))) == victim
	}
	failed := func(k string) bool { return onVictim[k] }
	var replica *redistest.Server
	for _, n := range cl.Nodes {
		if redistest.Info(t, n.Addr(), "replication", "master_port") == strconv.Itoa(victim.Port) {
			replica = n
		}
	}
	r := runFailover(t, s, keys, failed, victim.Kill, replica, 12*time.Second)
	lost, kept := r.balances(t, s, keys, failed)
	t.Logf("cluster failover: %v; of the failed master's, %d charges lost, %d kept by failed calls", r, lost, kept)
	if r.errs[1] != 0 {
		t.Errorf("%d errors for keys of masters that stayed up", r.errs[1])
	}
	if r.errs[0] == 0 {
		t.Error("no request failed while a master was down")
	}
	r.recovered(t, time.Second)
}

// TestSentinelFailover: the same with a master, its replica and a
// Sentinel that promotes the replica a second after the master stops
// answering.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	poll.Eventually(t, 10*time.Second, func() bool {
		return redistest.Info(t, replica.Addr(), "replication", "master_link_status") == "up"
	}, "the replica in sync")
	sentinel := redistest.StartSentinel(t, "fo", master,
		"sentinel down-after-milliseconds fo 1000", "sentinel failover-timeout fo 5000")
	s := failoverStore(t, redisconn.Config{Addr: sentinel.Addr(), SentinelMaster: "fo"})
	keys := failoverKeys(30)
	all := func(string) bool { return true }
	r := runFailover(t, s, keys, all, master.Kill, replica, 10*time.Second)
	lost, kept := r.balances(t, s, keys, all)
	t.Logf("sentinel failover: %v; %d charges lost with the master, %d kept by failed calls", r, lost, kept)
	if r.errs[0] == 0 {
		t.Error("no request failed while the master was down")
	}
	r.recovered(t, 3*time.Second)
}
