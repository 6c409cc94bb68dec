package redis

// Ambiguous timeouts: a request whose call was sent and not answered
// within its deadline may still be decided by Redis, charging buckets for
// a request the service answered without the store (on_store_error). Its
// error is an *ambiguous (store.Ambiguous), and the service tells it,
// with Resolve, whether the request went through on that answer.
//
// The call itself goes on for lateWait past its batch's latest deadline
// (batch.go), so its answer usually arrives; without it, a request with an
// id reads the answer recorded under the id. Then:
//
//   - the call did not charge (rejected, a replay, or never run): nothing
//     to do ("uncharged");
//   - it charged and the request went through, or it holds a report
//     (usage, never undone; its id's answer must replay it): the charge
//     stays ("kept");
//   - it charged and the request was refused: the charge is refunded, in
//     one settle call that adds each bucket's cost back (capped at
//     capacity, which is exactly the balance had it never been charged),
//     and a request id's answer is released so that a retry is decided
//     afresh ("refunded", or "refund_failed" when that call fails);
//   - no answer and no id: the charge, if any, stays ("unknown"; the
//     client may also have closed the connection, and Redis dropped the
//     call unrun).
//
// What remains: requests decided between the late charge and its refund
// see the bucket short by that cost (at most the cost of the ambiguous
// requests, for at most lateWait plus a round trip); an "unknown" charge
// stays; a refund request (negative cost) that was applied late is not
// undone; and a request id whose answer was recorded by an earlier call
// of the same request (a retry, same buckets and costs, whose own call
// never ran) is taken for this call's, refunding that earlier charge, or
// one whose call is still queued in Redis on another connection is read
// before it runs. On a Cluster a request of one slot is reconciled so
// too; one whose buckets span slots fails whole, and the charges of its
// reserves out at the deadline are rolled back when they are answered
// (cross.go). tokengate_redis_ambiguous_total counts each outcome.

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/store"
)

// lateWait is how long a call goes on past its requests' deadlines.
const lateWait = 250 * time.Millisecond

// ambiguous is the error of a request whose call was out at its deadline.
type ambiguous struct {
	err  error
	s    *Store
	call *queued
	now  string     // the call's instant
	tags [][16]byte // of the request's buckets
	// keys and items are the request's bucket keys (then its id's key)
	// and, per bucket key, its cost, reservation and rate period; hold
	// names its reservations (holdName).
	keys  []string
	items []lateItem
	id    bool
	hold  string
	once  sync.Once
}

type lateItem struct {
	cost, reserve, per int64
	report             bool
}

var _ store.Ambiguous = (*ambiguous)(nil)

func (s *Store) ambiguous(err error, call *queued, req *store.Request, tags [][16]byte, keys []string, now string) *ambiguous {
	items := make([]lateItem, len(req.Items))
	for i := range req.Items {
		it := &req.Items[i]
		items[i] = lateItem{it.Cost, it.Reserve, int64(it.Version.Params.Rate().Per()), it.Charge == store.Report}
	}
	return &ambiguous{err: err, s: s, call: call, now: now, tags: tags, keys: keys, items: items, id: req.ID != "", hold: holdName(req)}
}

func (a *ambiguous) Error() string { return a.err.Error() }
func (a *ambiguous) Unwrap() error { return a.err }

// Resolve implements store.Ambiguous: it waits, in the background, for the
// call's answer and refunds a charge of a request that did not pass.
func (a *ambiguous) Resolve(passed bool) {
	a.once.Do(func() {
		go func() {
			<-a.call.done
			a.s.metrics.ambiguous.WithLabelValues(a.settle(passed)).Inc()
		}()
	})
}

func (a *ambiguous) settle(passed bool) string {
	charged, known := a.charged()
	switch {
	case !known:
		return "unknown"
	case !charged:
		return "uncharged"
	case passed || a.reported():
		return "kept"
	}
	if err := a.refund(); err != nil {
		// Counted, logged at debug once per failureLogEvery: refunds
		// fail when Redis does, which the breaker and the service
		// already log.
		if dropped, ok := a.s.logs.refund.Take(a.s.opts.Clock.Now()); ok {
			a.s.opts.Logger.LogAttrs(context.Background(), slog.LevelDebug, "redis: refund of a request charged after its timeout failed; the charge stays",
				slog.String("error", err.Error()), logbudget.Dropped(dropped))
		}
		return "refund_failed"
	}
	return "refunded"
}

// charged reports whether the call charged the request, and whether that
// is known: from the call's answer, else from the request id's record.
func (a *ambiguous) charged() (charged, known bool) {
	if a.call.err == nil {
		r, err := a.s.decodeCall(a.call, make([]itemRecord, len(a.items)))
		if err == nil {
			return r.kind == kindDecided && r.allowed, true
		}
	}
	if !a.id {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.s.opts.Timeout)
	defer cancel()
	c := a.s.client
	rec, err := c.Do(ctx, c.B().Hget().Key(a.keys[len(a.keys)-1]).Field(idFieldRecord).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return false, true // no answer recorded: the call never ran
	case err != nil || rec == idPending:
		return false, false
	}
	allowed, err := parseRecord(rec, make([]store.Result, len(a.items)))
	return allowed, err == nil
}

// reported: the request holds a report. Its charge is kept: a report is
// usage, never undone, and its request id's answer must stay so that a
// retry replays it rather than charge it again.
func (a *ambiguous) reported() bool {
	for _, it := range a.items {
		if it.report {
			return true
		}
	}
	return false
}

// refund adds every charged bucket's cost back, gives back and removes
// its reservations, and releases the request id's answer, in one settle
// call.
func (a *ambiguous) refund() error {
	// Two items of one key are one bucket (one rule, one period): their
	// costs add up. A check that reserves costs its reservation, once a
	// bucket (an id reserves a bucket once).
	units := map[string]*big.Int{}
	held := map[string]int64{}
	var keys []string
	var pers []int64
	for i, it := range a.items {
		k, cost := a.keys[i], it.cost
		if it.reserve > 0 && held[k] == 0 {
			cost, held[k] = it.reserve, it.reserve
		}
		if cost <= 0 {
			continue
		}
		if units[k] == nil {
			units[k] = new(big.Int)
			keys, pers = append(keys, k), append(pers, it.per)
		}
		units[k].Add(units[k], new(big.Int).Mul(big.NewInt(cost), big.NewInt(it.per)))
	}
	entries := make([]string, 0, settleArgs*len(keys))
	for j, k := range keys {
		hold := ""
		if held[k] > 0 {
			hold = strconv.FormatInt(held[k], 10)
		}
		entries = append(entries, units[k].String(), strconv.FormatInt(pers[j], 10), "0", hold)
	}
	idKey := ""
	if a.id {
		idKey = a.keys[len(a.keys)-1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.s.opts.Timeout)
	defer cancel()
	for _, c := range a.s.settleCalls(a.now, a.hold, keys, entries, idKey, idRelease, "") {
		msgs, err := a.s.call(ctx, c.keys, c.args)
		if err == nil {
			_, err = a.s.decodeReply(msgs, nil)
		}
		if err != nil {
			return fmt.Errorf("redis: refund %d buckets: %w", len(entries)/settleArgs, err)
		}
	}
	if a.s.deny != nil {
		a.s.deny.forget(a.tags)
	}
	return nil
}
