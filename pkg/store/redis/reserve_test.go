package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// decideID decides items with request id id at the store's clock's
// reading.
func decideID(t testing.TB, s *Store, id string, items ...store.Item) (store.Outcome, []store.Result) {
	t.Helper()
	res := make([]store.Result, len(items))
	out, err := s.Decide(context.Background(), &store.Request{Now: s.opts.Clock.Now(), ID: id, Items: items}, res)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return out, res
}

// pttl is key's PTTL, through s's client.
func pttl(t testing.TB, s *Store, key string) int64 {
	t.Helper()
	ms, err := s.client.Do(context.Background(), s.client.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestReserveRecords: with expiry, on the shared clock driven by a fake
// one, a reservation is a field of its bucket's holds hash, which lives as
// long as the reservation and the record (both with the tolerance); the
// record is marked, kept when full while it owes the reservation, and
// decided on the general path; the reservation comes back at its expiry
// to the nanosecond, after which the hash is gone, the mark too, and a
// full bucket is deleted as any.
func TestReserveRecords(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	const tol = 50 * time.Millisecond
	clk := new(clock.Fake)
	s := newStore(t, c, Options{Clock: clk, ClockStepTolerance: tol, DenyCacheBytes: new(0)})
	v := storetest.PostPaidVersion(t, 1, 100, "1/h", 100)
	key, hkey := s.bucketKey(tagBytes("u")), s.bucketKey(tagBytes("u"))+holdsSuffix
	balance := func() int64 {
		_, res := decide(t, s, 0, store.Item{Key: "u", Version: v})
		return res[0].Remaining
	}
	hold := store.Item{Key: "u", Version: v, Charge: store.Check, Reserve: 30, ReserveTTL: int64(10 * time.Second)}
	if out, res := decideID(t, s, "a", hold); !out.Allowed || res[0].Remaining != 70 {
		t.Fatalf("reserving 30: %+v %+v", out, res[0])
	}
	if n, err := c.Do(context.Background(), c.B().Hlen().Key(hkey).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("holds hash: %d fields (%v), want 1", n, err)
	}
	if ms := pttl(t, s, hkey); ms < (10*time.Second+2*tol).Milliseconds()-200 || ms < pttl(t, s, key)-200 {
		t.Fatalf("holds hash PTTL %dms, record %dms: want the reservation's life and the record's", ms, pttl(t, s, key))
	}
	if rec := readRecord(t, c, key); !slices.Contains([]byte(rec.ident), holdSep[0]) {
		t.Fatalf("record %q of a bucket with a reservation is not marked", rec.ident)
	}
	// Refunded to full, it is kept: it owes 30.
	general := testutil.ToFloat64(s.metrics.general)
	decide(t, s, 0, store.Item{Key: "u", Version: v, Cost: -50})
	if testutil.ToFloat64(s.metrics.general) != general+1 {
		t.Fatal("a decision on a marked bucket took the lean path")
	}
	if n, _ := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64(); n != 1 {
		t.Fatal("a full bucket that owes a reservation was deleted")
	}
	decide(t, s, 0, store.Item{Key: "u", Version: v, Cost: 60})
	clk.Set(int64(10*time.Second) - 1)
	if b := balance(); b != 40 {
		t.Fatalf("a nanosecond before the expiry: %d, want 40", b)
	}
	clk.Set(int64(10 * time.Second))
	if b := balance(); b != 70 {
		t.Fatalf("at the expiry: %d, want the 30 back", b)
	}
	if n, _ := c.Do(context.Background(), c.B().Exists().Key(hkey).Build()).AsInt64(); n != 0 {
		t.Fatal("the holds hash outlived its last reservation")
	}
	if rec := readRecord(t, c, key); slices.Contains([]byte(rec.ident), holdSep[0]) {
		t.Fatalf("record %q still marked", rec.ident)
	}
	// The report of the expired reservation is a plain one; filled again,
	// the bucket is deleted.
	if _, res := decideID(t, s, "a", store.Item{Key: "u", Version: v, Cost: 5, Charge: store.Report}); res[0].Remaining != 65 {
		t.Fatalf("report of an expired reservation: %+v, want 5 charged", res[0])
	}
	decide(t, s, 0, store.Item{Key: "u", Version: v, Cost: -100})
	if n, _ := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64(); n != 0 {
		t.Fatal("a full bucket without reservations was kept")
	}
}

// TestCommandsPerReservation counts what a reserving check and its
// settling report add to a check and report of one request id: the check
// reads its bucket's hash once it is marked (HGET: does the id hold it
// already?), records the reservation (HSET) and makes the hash live as
// long as it (PTTL, and PEXPIRE when it must grow); the report reads and
// deletes it (HGET, HDEL). Everything else is what a pair with a request
// id costs: per decision one FCALL, the id's HMGET, one MGET, one SET and
// the id's answer (HSET, PEXPIRE).
func TestCommandsPerReservation(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{})
	v := storetest.PostPaidVersion(t, 1, 1_000_000, "100/s", 100_000)
	check := store.Item{Version: v, Charge: store.Check, Reserve: 10, ReserveTTL: int64(time.Minute)}
	report := store.Item{Version: v, Cost: 7, Charge: store.Report}
	pair := func(i int) {
		id := "p" + strconv.Itoa(i)
		check.Key, report.Key = "a"+strconv.Itoa(i%5), "a"+strconv.Itoa(i%5)
		if out, _ := decideID(t, s, id, check); !out.Allowed {
			t.Fatalf("pair %d: check refused", i)
		}
		if _, res := decideID(t, s, id, report); res[0].Remaining >= 1_000_000 {
			t.Fatalf("pair %d: report %+v", i, res[0])
		}
	}
	for i := range 10 { // every bucket stored and marked
		pair(i)
	}
	before := commandStats(t, srv.Addr())
	const n = 100
	for i := range n {
		pair(i + 10)
	}
	after := commandStats(t, srv.Addr())
	got := map[string]int64{}
	for cmd, calls := range after {
		if d := calls - before[cmd]; d != 0 {
			got[cmd] = d
		}
	}
	// Each reservation lives a minute more than the one before, so the
	// hash's PTTL is always short of it and grows (PEXPIRE).
	want := map[string]int64{"fcall": 2 * n, "hmget": 2 * n, "mget": 2 * n, "set": 2 * n, "hset": 3 * n,
		"pexpire": 3 * n, "pttl": n, "hget": 2 * n, "hdel": n, "info": 1}
	for cmd := range merge(got, want) {
		if got[cmd] != want[cmd] {
			t.Errorf("%d %s for %d pairs, want %d", got[cmd], cmd, n, want[cmd])
		}
	}
}

func merge(a, b map[string]int64) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// TestReserveCluster: on Redis Cluster reservations hold and settle as
// on a single node, in one slot and across slots: a request whose buckets
// span slots and is rolled back (another slot refused it) holds nothing,
// so its report is a plain one; and a repeat of a request id spanning
// slots charges none of its reports again (its slots are sent only once
// the first one claimed the id).
func TestReserveCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c, Options{RequestTime: true, DenyCacheBytes: new(0)})
	v := storetest.PostPaidVersion(t, 1, 100, "1/h", 100)
	other := func(k string) string {
		o := k + "x"
		for i := 0; tagSlot(tagBytes(o)) == tagSlot(tagBytes(k)); i++ {
			o = k + strconv.Itoa(i)
		}
		return o
	}
	left := func(k string) int64 {
		_, res := decide(t, s, 0, store.Item{Key: k, Version: v})
		return res[0].Remaining
	}
	hold := func(k string, n int64) store.Item {
		return store.Item{Key: k, Version: v, Charge: store.Check, Reserve: n, ReserveTTL: int64(time.Minute)}
	}
	report := func(k string, cost int64) store.Item {
		return store.Item{Key: k, Version: v, Cost: cost, Charge: store.Report}
	}

	if out, res := decideID(t, s, "a", hold("u", 40)); !out.Allowed || res[0].Remaining != 60 {
		t.Fatalf("reserving 40: %+v %+v", out, res[0])
	}
	if _, res := decideID(t, s, "a", report("u", 10)); res[0].Remaining != 90 {
		t.Fatalf("settling 10 of 40: %+v, want 30 back", res[0])
	}

	w := other("u")
	if out, _ := decideID(t, s, "b", hold("u", 30), hold(w, 20)); !out.Allowed || left("u") != 60 || left(w) != 80 {
		t.Fatalf("reserving across slots: %+v, %d and %d left, want 60 and 80", out, left("u"), left(w))
	}
	if _, res := decideID(t, s, "b", report("u", 5), report(w, 25)); res[0].Remaining != 85 || res[1].Remaining != 75 {
		t.Fatalf("settling across slots: %+v, want 85 and 75", res)
	}
	// Rolled back: w's slot refuses (a cost above its balance).
	if out, _ := decideID(t, s, "c", hold("u", 30), store.Item{Key: w, Version: v, Cost: 90}); out.Allowed || left("u") != 85 || left(w) != 75 {
		t.Fatalf("a refused request across slots: %+v, %d and %d left, want 85 and 75", out, left("u"), left(w))
	}
	if _, res := decideID(t, s, "c", report("u", 5)); res[0].Remaining != 80 {
		t.Fatalf("the report of a rolled-back reservation: %+v, want a plain report", res[0])
	}

	x := other("y")
	items := []store.Item{report("y", 3), report(x, 4)}
	for i := range 2 {
		if out, _ := decideID(t, s, "d", items...); out.Replayed != (i > 0) {
			t.Fatalf("decision %d of one id: %+v", i, out)
		}
	}
	if left("y") != 97 || left(x) != 96 {
		t.Fatalf("a replayed request across slots: %d and %d left, want 97 and 96 (its reports charged once)", left("y"), left(x))
	}
}

// TestAmbiguousReserve: a check that reserves, out at its deadline and
// resolved as refused, has its reservation given back and removed: the
// balance is whole again and the id's report is a plain one.
func TestAmbiguousReserve(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{})
	v := storetest.PostPaidVersion(t, 1, 100, "1/h", 100)
	balance := func() int64 {
		_, res := decide(t, s, 0, store.Item{Key: "u", Version: v})
		return res[0].Remaining
	}
	balance() // the clock anchored, the library loaded
	// Held until the call is out past its deadline, then resumed, well
	// within the call's late wait: its answer comes late.
	resume := pauseWrites(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	items := []store.Item{{Key: "u", Version: v, Charge: store.Check, Reserve: 30, ReserveTTL: int64(time.Minute)}}
	_, err := s.Decide(ctx, &store.Request{Now: s.opts.Clock.Now(), ID: "a", Items: items}, make([]store.Result, 1))
	resume()
	resumed := time.Now()
	var amb store.Ambiguous
	if !errors.As(err, &amb) {
		t.Fatalf("a reserving check out at its deadline: %v, want an ambiguous error", err)
	}
	amb.Resolve(false)
	poll.Eventually(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(s.metrics.ambiguous.WithLabelValues("refunded")) == 1
	}, "the reservation refunded")
	time.Sleep(time.Until(resumed.Add(50 * time.Millisecond)))
	if b := balance(); b != 100 {
		t.Fatalf("after the refund: %d, want 100", b)
	}
	if _, res := decideID(t, s, "a", store.Item{Key: "u", Version: v, Cost: 10, Charge: store.Report}); res[0].Remaining != 90 {
		t.Fatalf("the report of a refunded reservation: %+v, want a plain report", res[0])
	}
}
