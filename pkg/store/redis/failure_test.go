package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestRedisDown: a dead Redis fails fast with ErrUnavailable once the
// circuit opens, and a live one is used again after a successful ping.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	s := newStore(t, c, Options{Timeout: 50 * time.Millisecond, Breaker: BreakerOptions{Window: new(time.Duration(0)), MinBackoff: time.Hour}})
	v := storetest.Version(t, 1, 10, "1/s")
	decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 1})
	srv.Kill()
	var err error
	for range 3 {
		_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
		if err == nil {
			t.Fatal("no error with Redis down")
		}
	}
	begin := time.Now()
	_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, make([]store.Result, 1))
	if !errors.Is(err, store.ErrUnavailable) || time.Since(begin) > 10*time.Millisecond {
		t.Fatalf("open circuit: %v after %v, want ErrUnavailable at once", err, time.Since(begin))
	}
	if s.Ping(context.Background()) == nil {
		t.Fatal("ping succeeded with Redis down")
	}
	srv.Restart()
	poll.Eventually(t, 10*time.Second, func() error { return s.Ping(context.Background()) }, "a ping to answer after Redis restarted")
	// A pipelined connection that died with the old server fails its
	// first command (never retried: a decision is not idempotent); each
	// ping lets the breaker probe again at once.
	res := make([]store.Result, 1)
	for i := 0; ; i++ {
		_, err = s.Decide(context.Background(), &store.Request{Items: []store.Item{{Key: "a", Version: v, Cost: 1}}}, res)
		if err == nil {
			break
		}
		if i == 10 {
			t.Fatalf("still failing after Redis came back: %v", err)
		}
		s.Ping(context.Background())
	}
	if res[0].Remaining != 9 {
		t.Fatalf("after recovery: %+v (a fresh Redis: 9 left)", res[0])
	}
}

// TestCrossSlotRequestID: on a Cluster, a request whose buckets span slots
// replays its answer for a repeated id, and concurrent duplicates are
// charged once.
func TestCrossSlotRequestID(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c, Options{})
	v := storetest.Version(t, 1, 100, "1/h")
	items := []store.Item{{Key: "x", Version: v, Cost: 10}, {Key: "y", Version: v, Cost: 10}, {Key: "z", Version: v, Cost: 10}}
	if len(bySlot([][16]byte{tagBytes("x"), tagBytes("y"), tagBytes("z")})) < 2 {
		t.Fatal("test keys share a slot: pick others")
	}
	var wg sync.WaitGroup
	outs := make([]store.Outcome, 8)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]store.Result, len(items))
			out, err := s.Decide(context.Background(), &store.Request{ID: "dup", Items: items}, res)
			if err != nil {
				t.Error(err)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	decided := 0
	for _, o := range outs {
		if !o.Allowed {
			t.Fatalf("a duplicate was rejected: %+v", outs)
		}
		if !o.Replayed {
			decided++
		}
	}
	// At most MaxReplays+1 answers replay or decide once each: more than
	// that many concurrent duplicates are decided anew by design.
	_, res := decide(t, s, 0, store.Item{Key: "x", Version: v})
	if charged := (100 - res[0].Remaining) / 10; charged != int64(decided) || decided > len(outs)-store.MaxReplays {
		t.Fatalf("%d decided, %d charged on x (outcomes %+v)", decided, charged, outs)
	}
	if !strings.Contains(s.idKey(tagBytes("x"), "dup", ""), tag("x")) {
		t.Fatal("the id key is not in the first bucket's slot")
	}
}

// TestBreakerRecoversAfterStall reproduces a stall whose half-open probes
// are heavy requests that time out (issue 25, finding 1): Redis paused
// (CLIENT PAUSE) under light requests until they open the circuit (15 on
// a quiet machine), then only 9-bucket requests every 100ms. While the circuit is open and Redis
// answers pings again, Health says the store is degraded; the next heavy
// request probes, and the circuit closes.
func TestBreakerRecoversAfterStall(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{Timeout: 15 * time.Millisecond})
	v := storetest.Version(t, 1, 100, "1/s")
	warm(t, s, store.Item{Key: "warm", Version: v, Cost: 1})
	heavy := make([]store.Item, 9)
	for i := range heavy {
		heavy[i] = store.Item{Key: "h" + strconv.Itoa(i), Version: v, Cost: 1}
	}
	light := []store.Item{{Key: "l", Version: v, Cost: 1}}
	try := func(items []store.Item) error {
		_, err := s.Decide(context.Background(), &store.Request{Items: items}, make([]store.Result, len(items)))
		return err
	}
	paused := time.Now()
	if _, err := redistest.Do(srv.Addr(), "CLIENT", "PAUSE", "1500", "ALL"); err != nil {
		t.Fatal(err)
	}
	// Light requests until the circuit opens: 15 of 15ms span the 200ms
	// window on a quiet machine; a loaded one may need a few more.
	for n := 1; ; n++ {
		if try(light) == nil {
			t.Fatal("a light request passed while Redis was paused")
		}
		if _, open := s.breaker.OpenFor(); open {
			break
		}
		if time.Since(paused) > time.Second {
			t.Fatalf("%d light requests timed out in a row over %v and the circuit stayed closed", n, time.Since(paused))
		}
	}
	for time.Since(paused) < 1400*time.Millisecond {
		if try(heavy) == nil {
			t.Fatal("a heavy request passed while Redis was paused")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(paused.Add(1600 * time.Millisecond)))
	if err := s.Health(context.Background()); err == nil || !strings.Contains(err.Error(), "circuit open") {
		t.Fatalf("Health with Redis back and the circuit open: %v, want the open circuit named", err)
	}
	var err error
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = try(heavy); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("heavy requests still refused 7s after Redis came back: %v", err)
	}
	if err := s.Health(context.Background()); err != nil {
		t.Fatalf("Health after a decision succeeded: %v", err)
	}
	if err := try(light); err != nil {
		t.Fatalf("a light request after the circuit closed: %v", err)
	}
}
