package redis

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// decide decides items at now, or, for a store on the shared clock, at its
// clock's reading.
func decide(t testing.TB, s *Store, now int64, items ...store.Item) (store.Outcome, []store.Result) {
	t.Helper()
	if !s.opts.RequestTime {
		now = s.opts.Clock.Now()
	}
	res := make([]store.Result, len(items))
	out, err := s.Decide(context.Background(), &store.Request{Now: now, Items: items}, res)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return out, res
}

// warm readies a store with a short timeout for a test: the library
// loaded and the clock anchored (Prepare, with time to spare), then one
// decision of item, tried until it passes its timeout: the first calls on
// a loaded machine may take longer than a short one.
func warm(t testing.TB, s *Store, item store.Item) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Prepare(ctx); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		_, err := s.Decide(context.Background(), &store.Request{Now: s.opts.Clock.Now(), Items: []store.Item{item}}, make([]store.Result, 1))
		return err
	}, "a first decision within the store's timeout")
}

// TestTTLUntilFull: a bucket's key lives until the bucket is full again
// and twice ClockStepTolerance (one in debt too), and a full bucket is
// deleted.
func TestTTLUntilFull(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	const tol = 50 * time.Millisecond
	s := newStore(t, c, Options{ClockStepTolerance: tol})
	v := storetest.Version(t, 1, 10, "1/s")
	_, res := decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 4})
	if res[0].Remaining != 6 || res[0].ResetAfter <= 3*int64(time.Second) || res[0].ResetAfter > 4*int64(time.Second) {
		t.Fatalf("first charge: %+v", res[0])
	}
	pttl, err := c.Do(context.Background(), c.B().Pttl().Key(s.bucketKey(tagBytes("a"))).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if want := (res[0].ResetAfter+999_999)/1_000_000 + 2*tol.Milliseconds(); pttl > want || pttl < want-200 {
		t.Fatalf("PTTL %dms, want about %dms (time until full and twice the tolerance)", pttl, want)
	}
	// A refund that fills the bucket deletes its key.
	decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: -10})
	if n, _ := c.Do(context.Background(), c.B().Exists().Key(s.bucketKey(tagBytes("a"))).Build()).AsInt64(); n != 0 {
		t.Fatal("a full bucket's key was kept")
	}
	// A fast bucket empties, expires when full, and comes back full.
	fast := storetest.Version(t, 2, 5, "1000/s")
	decide(t, s, 0, store.Item{Key: "b", Version: fast, Cost: 5})
	poll.Eventually(t, 2*time.Second, func() bool {
		n, _ := c.Do(context.Background(), c.B().Exists().Key(s.bucketKey(tagBytes("b"))).Build()).AsInt64()
		return n == 0
	}, "an empty 1000/s bucket of 5 to expire")
	if _, res := decide(t, s, 0, store.Item{Key: "b", Version: fast}); res[0].Remaining != 5 {
		t.Fatalf("after expiry: %d tokens, want 5", res[0].Remaining)
	}
	// A bucket in debt lives until it is full again: its debt repaid, then
	// its capacity refilled.
	post := storetest.PostPaidVersion(t, 3, 10, "1/s", 100)
	_, res = decide(t, s, 0, store.Item{Key: "c", Version: post, Cost: 40, Charge: store.Report})
	if res[0].Debt != 30 || res[0].ResetAfter <= 39*int64(time.Second) || res[0].ResetAfter > 40*int64(time.Second) {
		t.Fatalf("report of 40 on 10: %+v", res[0])
	}
	pttl, err = c.Do(context.Background(), c.B().Pttl().Key(s.bucketKey(tagBytes("c"))).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if want := (res[0].ResetAfter+999_999)/1_000_000 + 2*tol.Milliseconds(); pttl > want || pttl < want-200 {
		t.Fatalf("in debt: PTTL %dms, want about %dms (time until full and twice the tolerance)", pttl, want)
	}
}

// TestOneRoundTrip counts the commands Redis processed: exactly one per
// decision (the FCALL, or the EVALSHA on a server without functions),
// even for several buckets and a request id.
func TestOneRoundTrip(t *testing.T) {
	for _, mode := range []string{"fcall", "evalsha"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv.Addr())
			s := newStore(t, c, Options{})
			s.evalOnly.Store(mode == "evalsha")
			v := storetest.Version(t, 1, 1000, "100/s")
			decide(t, s, 0, store.Item{Key: "warm", Version: v, Cost: 1}) // loads the script
			before := commandStats(t, srv.Addr())
			const n = 200
			for i := range n {
				items := []store.Item{{Key: "a", Version: v, Cost: 1}, {Key: "b" + strconv.Itoa(i%7), Version: v, Cost: 1}}
				res := make([]store.Result, 2)
				if _, err := s.Decide(context.Background(), &store.Request{ID: "id-" + strconv.Itoa(i), Items: items}, res); err != nil {
					t.Fatal(err)
				}
			}
			after := commandStats(t, srv.Addr())
			// Commands the script runs inside Redis are counted too; what
			// the client sent is everything else (and the INFO of
			// commandStats).
			inner := map[string]bool{"time": true, "mget": true, "set": true, "setrange": true, "hmget": true, "hset": true, "pexpire": true, "del": true, "hincrby": true, "info": true}
			// The client may open another pipelined connection while the
			// requests run; its handshake is per connection, not per
			// decision, and bounded.
			handshake := map[string]bool{"hello": true, "client|setinfo": true, "client|tracking": true, "select": true, "auth": true, "ping": true}
			for cmd, calls := range after {
				d := calls - before[cmd]
				switch {
				case cmd == mode && d != n:
					t.Errorf("%d %s for %d decisions, want exactly one each", d, mode, n)
				case handshake[cmd] && d > 8:
					t.Errorf("%d %s calls: more connections opened than the pool holds", d, cmd)
				case cmd != mode && !inner[cmd] && !handshake[cmd] && d != 0:
					t.Errorf("%d %s calls: a decision sent more than its %s", d, cmd, mode)
				}
			}
		})
	}
}

// TestCommandsPerDecision: the usual decision (buckets stored, no request
// id) is one FCALL that runs one MGET and one SETRANGE per bucket it
// charges, and nothing else: a pre-paid one, and a post-paid rule's check
// (which charges nothing, so writes nothing) and report (charged, into a
// debt too), each decided by the lean path.
func TestCommandsPerDecision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		charge   store.Charge
		cost     int64
		setrange int64
	}{
		{"pre-paid", store.Prepaid, 1, 2},
		{"check", store.Check, 0, 0},
		{"report", store.Report, 40_000, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, newClient(t, srv.Addr()), Options{})
			v := storetest.PostPaidVersion(t, 1, 1_000_000, "100/s", 100_000)
			decide := func(i int, charge store.Charge, cost int64) {
				items := []store.Item{{Key: "a" + strconv.Itoa(i%5), Version: v, Cost: cost, Charge: charge}, {Key: "b" + strconv.Itoa(i%7), Version: v, Cost: cost, Charge: charge}}
				if _, err := s.Decide(context.Background(), &store.Request{Items: items}, make([]store.Result, 2)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 35 { // every bucket stored
				decide(i, store.Prepaid, 1)
			}
			before := commandStats(t, srv.Addr())
			const n = 200
			for i := range n {
				decide(i, tc.charge, tc.cost)
			}
			after := commandStats(t, srv.Addr())
			want := map[string]int64{"fcall": n, "mget": n, "setrange": tc.setrange * n, "info": 1}
			for cmd, calls := range after {
				if d := calls - before[cmd]; d != want[cmd] {
					t.Errorf("%d %s for %d decisions, want %d", d, cmd, n, want[cmd])
				}
			}
			// 35 buckets-new decisions first, all lean too (with expiry).
			if lean, general := testutil.ToFloat64(s.metrics.lean), testutil.ToFloat64(s.metrics.general); lean != 35+n || general != 0 {
				t.Errorf("decisions by path: lean %v, general %v; want %d and 0", lean, general, 35+n)
			}
		})
	}
}

// commandStats reads INFO commandstats: calls by command.
func commandStats(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	out, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		m[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return m
}

// TestScriptFlush: after FUNCTION FLUSH (or, without functions, SCRIPT
// FLUSH) the next call loads the code again and decisions go on,
// balances intact.
func TestScriptFlush(t *testing.T) {
	for _, tc := range []struct{ mode, flush, reload string }{
		{"fcall", "FUNCTION", "function|load"},
		{"evalsha", "SCRIPT", "eval"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv.Addr())
			s := newStore(t, c, Options{})
			s.evalOnly.Store(tc.mode == "evalsha")
			v := storetest.Version(t, 1, 10, "1/h")
			decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 3})
			before := commandStats(t, srv.Addr())[tc.reload]
			if _, err := redistest.Do(srv.Addr(), tc.flush, "FLUSH"); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 1})
			}
			if _, res := decide(t, s, 0, store.Item{Key: "a", Version: v}); res[0].Remaining != 4 {
				t.Fatalf("after %s FLUSH: %d tokens, want 4", tc.flush, res[0].Remaining)
			}
			if got := commandStats(t, srv.Addr())[tc.reload] - before; got != 1 {
				t.Fatalf("%d %s calls after the flush, want one reload", got, tc.reload)
			}
		})
	}
}

// TestRollingUpdate: two processes share Redis; the one that applied a
// policy change later moves a bucket to new parameters, and the old one
// then decides under those (stored with the bucket) and never moves it
// back.
func TestRollingUpdate(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	oldReplica, newReplica := newStore(t, c, Options{}), newStore(t, c, Options{})
	vOld := storetest.Version(t, 1, 100, "1/h")
	// Another process (its own IDs), which applied its change an hour after
	// the old replica applied its policy.
	vNew := bucket.NewVersion(1, storetest.Params(t, 10, "1/h"), int64(time.Hour))
	decide(t, oldReplica, 0, store.Item{Key: "a", Version: vOld, Cost: 50, Revision: 7})
	_, res := decide(t, newReplica, 0, store.Item{Key: "a", Version: vNew, Cost: 1, Revision: 8})
	if res[0].Remaining != 9 {
		t.Fatalf("the change clamps 50 to 10, then 1: %d left, want 9", res[0].Remaining)
	}
	_, res = decide(t, oldReplica, 0, store.Item{Key: "a", Version: vOld, Cost: 1, Revision: 7})
	if res[0].Remaining != 8 {
		t.Fatalf("the old replica moved the bucket back: %d left, want 8 (capacity 10)", res[0].Remaining)
	}
	// The same revision with other parameters (no revision bump): the
	// version activated later wins; an earlier one does not move it.
	vEarlier := bucket.NewVersion(5, vOld.Params, -int64(time.Hour))
	_, res = decide(t, oldReplica, 0, store.Item{Key: "a", Version: vEarlier, Cost: 1, Revision: 8})
	if res[0].Remaining != 7 {
		t.Fatalf("an earlier activation at the same revision moved the bucket: %d left, want 7", res[0].Remaining)
	}
}

// TestClockBehindCursor: a bucket whose cursor is ahead of Redis TIME (the
// host's clock stepped back, or a failover to a host behind) gets no
// tokens until TIME passes the cursor, and waits count from the cursor.
func TestClockBehindCursor(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	s := newStore(t, c, Options{})
	v := storetest.Version(t, 1, 2, "1/s")
	decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 2})
	key := s.bucketKey(tagBytes("a"))
	rec := readRecord(t, c, key)
	ahead := rec.cursor() + int64(10*time.Second) // the clock is now 10s behind the cursor
	rec.setCursor(ahead)
	writeRecord(t, c, key, rec)
	out, res := decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 1})
	if out.Allowed || res[0].RetryAfter < int64(10*time.Second) || res[0].RetryAfter > int64(11*time.Second) {
		t.Fatalf("clock 10s behind the cursor: %+v %+v, want a wait of about 11s", out, res[0])
	}
	if rec := readRecord(t, c, key); rec.cursor() != ahead {
		t.Fatalf("the cursor moved back: %d, was %d", rec.cursor(), ahead)
	}
}

// A bucket record as tests read it (contract.go): recBytes of doubles,
// then the identity.
type bucketRecord struct {
	nums  [recBytes / 8]float64
	ident string
}

// Its numbers: tokens, then fraction, cursor and activation as h*10^9 + l.
const (
	recTokens = iota
	recFracH
	recFracL
	recCursorH
	recCursorL
	recActivationH
	recActivationL
	recExpiry
)

func (r *bucketRecord) cursor() int64 {
	return int64(r.nums[recCursorH])*1e9 + int64(r.nums[recCursorL])
}

func (r *bucketRecord) setCursor(ns int64) {
	r.nums[recCursorH], r.nums[recCursorL] = float64(ns/1e9), float64(ns%1e9)
}

// readRecord reads a bucket's record.
func readRecord(t testing.TB, c rueidis.Client, key string) bucketRecord {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("read bucket %s: %v", key, err)
	}
	if len(s) < recBytes {
		t.Fatalf("bucket %s: record of %d bytes", key, len(s))
	}
	var r bucketRecord
	for i := range r.nums {
		r.nums[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8*i:])))
	}
	r.ident = s[recBytes:]
	return r
}

// writeRecord replaces a bucket's record, keeping its TTL.
func writeRecord(t testing.TB, c rueidis.Client, key string, r bucketRecord) {
	t.Helper()
	var b []byte
	for _, x := range r.nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	if err := c.Do(context.Background(), c.B().Set().Key(key).Value(string(b)+r.ident).Keepttl().Build()).Error(); err != nil {
		t.Fatalf("write bucket %s: %v", key, err)
	}
}

// TestExpiryCoversFull: whatever sequence of charges and refunds a bucket
// sees, its key lives at least ClockStepTolerance past the instant its
// stored balance is full (an earlier expiry would hand out a fresh
// bucket), and its record says so.
func TestExpiryCoversFull(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	const tol = 50 * time.Millisecond
	// The shared clock is Redis's TIME read over a round trip: within
	// jitter of the clock expiry runs on.
	const jitter = 5 * time.Millisecond
	s := newStore(t, c, Options{ClockStepTolerance: tol})
	v := storetest.Version(t, 1, 50, "20/s")
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 300 {
		key := "k" + strconv.Itoa(rng.IntN(3))
		decide(t, s, 0, store.Item{Key: key, Version: v, Cost: int64(rng.IntN(12) - 3)})
		rk := s.bucketKey(tagBytes(key))
		expMs, err := c.Do(context.Background(), c.B().Pexpiretime().Key(rk).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if expMs == -2 { // no key: the bucket is full
			continue
		}
		rec := readRecord(t, c, rk)
		st := bucket.State{Tokens: int64(rec.nums[recTokens]), Frac: int64(rec.nums[recFracH])*1e9 + int64(rec.nums[recFracL]), At: rec.cursor()}
		fullAt := v.Params.FullAt(st)
		if said := int64(rec.nums[recExpiry]) * 1e6; said < fullAt+int64(tol) || expMs*1e6 < fullAt+int64(tol-jitter) {
			t.Fatalf("step %d: key expires at %dms, record says %dns, bucket full at %dns", i, expMs, said, fullAt)
		}
	}
}
