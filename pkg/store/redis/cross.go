package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/store"
)

// A request whose buckets live on several Cluster nodes (or in several
// slots, while calls are not batched or the nodes not known) cannot be one
// script call. It is decided by a reserve and, when needed, a settle:
//
//  1. Reserve, one call per node (per slot while the nodes are not known
//     or calls not batched), all at once: each decides its own items
//     exactly as a whole request would. A reserve whose items are all
//     allowed keeps its charges; a bucket whose net effect is a refund
//     keeps its uncharged balance instead (its refund is "deferred").
//     A reserve that rejects charges nothing. Reports (post-paid usage) are
//     charged in every case: their balance is the "uncharged" one, the
//     base every settle entry is counted from, so no settle undoes one.
//  2. If every reserve allowed, the request is allowed: deferred refunds
//     are added (a settle call only where there are some). Otherwise it
//     is rejected: every charge that a reserve kept is added back. A
//     settle reads its buckets with one MGET: a call per slot.
//
// Adding back is exact: a charge of c undone later, with the cap at
// capacity, leaves the same balance as never charging, whatever was
// refilled or charged in between. So the store never oversells; what it
// can do is reject a concurrent request that found a bucket reserved by a
// request that is then rolled back (an under-sell, visible only while the
// two calls overlap). A settle that fails (Redis went away between the
// calls) leaves a charge in place or a refund unpaid: an under-sell again,
// logged and counted. A report charged by another request between the
// reserve and its rollback may be forgiven more than it would have been
// had the reservation never been made (the bucket was lower then): an
// under-charge again, never an oversell. With a request id, the first slot's call claims the
// id ("pending") and the settle writes the answer.
//
// Reserves and settles go through their nodes' batchers, sharing calls
// with other requests. A reserve still out at the request's deadline fails
// the request (on_store_error answers it) and is reconciled when its
// answer comes (lateWait): whatever it charged is rolled back, as are
// the other slots' charges at once, so a failed request leaves nothing
// charged but its reports; counted in tokengate_redis_ambiguous_total.
//
// The first slot's call, which claims the request id, goes first, alone,
// and the other slots' calls only once it claimed the id, so that a
// repeat (a replay, or one still being decided) charges no report of
// theirs again.
//
// A check that reserves (store.Item.Reserve) records its reservation in
// its slot's reserve; a rollback removes it with the charge it undoes, and
// should the reservation be gone by then (returned at its expiry, or
// settled by its report, between the two calls) adds its tokens back no
// more (a refund being deferred, a bucket whose net effect is one keeps
// its reservation, removed by an undo entry of 0).

type groupReply struct {
	reply
	items  []itemRecord
	settle []settleEntry
	lean   *compactCall // an allowed reserve the lean path answered: its undo entries
	err    error
}

// entries are what g's reserve asks to be settled, should the request be
// allowed or not: the script's, or a lean reserve's (which commits
// nothing), whose undo entries are made only for a rollback.
func (g *groupReply) entries(allowed bool) []settleEntry {
	switch {
	case g.lean == nil:
		return g.settle
	case allowed:
		return nil
	}
	return g.lean.undo()
}

func (s *Store) decideCross(ctx context.Context, req *store.Request, results []store.Result, at uint64, raw [][16]byte, groups [][]int) (store.Outcome, error) {
	now := strconv.FormatUint(at, 10)
	calls := make([]call, len(groups))
	hold := holdName(req)
	for g, idx := range groups {
		keys := make([]string, len(idx), len(idx)+1)
		tags := make([][16]byte, len(idx))
		for k, i := range idx {
			keys[k], tags[k] = s.bucketKey(raw[i]), raw[i]
		}
		// A node's part goes compact when it shares a batch, like a
		// decide, and takes the lean path when that applies.
		if s.batcherOf(keys[0]) != nil {
			if c := s.compactReserve(req, idx, tags, at); c != nil {
				calls[g] = call{keys: keys, compact: c}
				continue
			}
		}
		idMode, fp := idNone, ""
		if g == 0 && req.ID != "" {
			idMode, fp = idLast, fingerprint(req.Items)
			keys = append(keys, s.idKey(raw[0], req.ID, fp))
		}
		args := s.header(make([]string, 0, headerArgs+itemArgs*len(idx)), opReserve, now, idMode, len(idx), fp, hold)
		for _, i := range idx {
			args = s.item(args, &req.Items[i], req.Now)
		}
		calls[g] = call{keys: keys, args: args}
	}
	calls = s.sendReserves(ctx, req.ID != "", calls, groups, now, hold)

	replies := make([]groupReply, len(calls))
	var errs error
	for g := range calls {
		replies[g] = s.parseGroup(calls[g], len(groups[g]))
		errs = errors.Join(errs, replies[g].err)
	}
	first := replies[0]
	if errs != nil || first.kind != kindDecided {
		s.settle(ctx, now, hold, calls, replies, false, first.err == nil && first.claimed, "")
		switch {
		case errs != nil:
			return store.Outcome{}, fmt.Errorf("redis: reserve in %d slots: %w", len(groups), errs)
		case first.kind == kindReplay:
			return s.replay(first.record, results[:len(req.Items)])
		}
		return s.awaitReplay(ctx, req, results, raw, calls[0].keys[len(calls[0].keys)-1])
	}

	allowed, lean := true, true
	for g := range replies {
		allowed, lean = allowed && replies[g].allowed, lean && calls[g].reply == nil
	}
	if lean {
		s.metrics.lean.Inc()
	} else {
		s.metrics.general.Inc()
	}
	for g, idx := range groups {
		for k, i := range idx {
			it := replies[g].items[k]
			r := it.res
			// A report's answer is its own whatever the request's.
			if !allowed && req.Items[i].Charge != store.Report {
				if !r.Never {
					r.Remaining, r.Debt = max(it.extra1, 0), max(-it.extra1, 0)
				}
				r.ResetAfter = it.extra2
			}
			results[i] = r
		}
	}
	var rec string
	if first.claimed {
		rec = string(appendRecord(nil, allowed, results[:len(req.Items)]))
	}
	s.settle(ctx, now, hold, calls, replies, allowed, first.claimed, rec)
	return store.Outcome{Allowed: allowed}, nil
}

// sendReserves sends the reserve calls, all at once, and returns those
// sent. With a request id (withID) the first slot's call goes first, alone:
// it claims the id, or finds it answered (a replay) or being decided, and
// only a claim sends the others, so that a repeat charges no report of
// another slot again (a report is never rolled back). A call still out at
// the deadline is rolled back when its answer comes (rollbackLate).
func (s *Store) sendReserves(ctx context.Context, withID bool, calls []call, groups [][]int, now, hold string) []call {
	send := func(from, to int) {
		for g, w := range s.callAll(ctx, calls[from:to]) {
			if w != nil {
				go s.rollbackLate(now, hold, calls[from+g], w, len(groups[from+g]), from+g == 0)
			}
		}
	}
	if !withID {
		send(0, len(calls))
		return calls
	}
	send(0, 1)
	if r := s.parseGroup(calls[0], len(groups[0])); r.err != nil || r.kind != kindDecided {
		return calls[:1]
	}
	send(1, len(calls))
	return calls
}

func (s *Store) parseGroup(c call, n int) groupReply {
	if c.err != nil {
		return groupReply{err: c.err}
	}
	g := groupReply{items: make([]itemRecord, n)}
	if c.reply == nil { // a compact reserve the lean path answered
		g.reply, g.err = decodePacked(c.packed, g.items)
		if g.err == nil && g.allowed {
			g.lean = c.compact
		}
		return g
	}
	g.reply, g.err = s.decodeReply(c.reply, g.items)
	if g.err == nil && g.kind == kindDecided {
		g.settle, g.err = parseSettle(g.reply.settle)
	}
	return g
}

// settleArgs are the arguments of a settle call at the instant now:
// entries (settleArgs each) and, with idLast, the request id's record;
// hold names the request's reservations (holdName).
func (s *Store) settleArgs(now, idMode, hold string, entries []string, rec string) []string {
	args := s.header(make([]string, 0, headerArgs+len(entries)+1), opSettle, now, idMode, len(entries)/settleArgs, "", hold)
	args = append(args, entries...)
	if idMode == idLast {
		args = append(args, rec)
	}
	return args
}

// settle sends, to every slot that needs it, the commits (allowed) or the
// rollbacks (not allowed) of its reserve; to the first slot also the
// request id's answer (rec) or, without one, the release of its claim. A
// rollback removes the reservations the reserve recorded (hold names
// them).
func (s *Store) settle(ctx context.Context, now, hold string, calls []call, replies []groupReply, allowed, claimed bool, rec string) {
	var settles []call
	var kinds []string
	for g := range replies {
		r := &replies[g]
		var keys, entries []string
		for _, e := range r.entries(allowed) {
			if e.commit != allowed {
				continue
			}
			isNew := "0"
			if e.isNew {
				isNew = "1" // settleNew
			}
			keys = append(keys, calls[g].keys[e.index])
			entries = append(entries, e.units, e.per, isNew, e.hold)
		}
		idMode, idKey := idNone, ""
		if g == 0 && claimed {
			idMode, idKey = idRelease, calls[0].keys[len(calls[0].keys)-1]
			if rec != "" {
				idMode = idLast
			}
		}
		kind := "rollback"
		if allowed {
			kind = "commit"
		}
		for _, c := range s.settleCalls(now, hold, keys, entries, idKey, idMode, rec) {
			settles, kinds = append(settles, c), append(kinds, kind)
		}
	}
	if len(settles) == 0 {
		return
	}
	// The reserve may have used most of the budget: settles get their own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	s.callAll(sctx, settles)
	for i, c := range settles {
		result := "ok"
		if c.err == nil {
			_, c.err = s.decodeReply(c.reply, nil)
		}
		if c.err != nil {
			result = "error"
			// Counted (tokengate_redis_settles_total), logged at debug
			// once per failureLogEvery: a settle fails when Redis does,
			// which the breaker and the service log once per interval; a
			// line per failure would not scale.
			if dropped, ok := s.logs.settle.Take(s.opts.Clock.Now()); ok {
				s.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "redis: settle of a cross-slot request failed: a charge stays or a refund is lost (never an oversell)",
					slog.String("kind", kinds[i]), slog.String("error", c.err.Error()), logbudget.Dropped(dropped))
			}
		}
		s.metrics.settles.WithLabelValues(kinds[i], result).Inc()
	}
}

// settleCalls are the settle calls of entries (settleArgs each) of keys
// and, when idKey is not "", of the request id (idMode, with its record
// rec): one call, or on a Cluster one per slot, as a settle reads its
// buckets with one MGET (the id's in its slot's).
func (s *Store) settleCalls(now, hold string, keys, entries []string, idKey, idMode, rec string) []call {
	type group struct {
		slot          uint16
		keys, entries []string
		id            bool
	}
	var groups []group
	of := func(key string) *group {
		var sl uint16
		if s.cluster {
			sl = keySlot(key)
		}
		for i := range groups {
			if groups[i].slot == sl {
				return &groups[i]
			}
		}
		groups = append(groups, group{slot: sl})
		return &groups[len(groups)-1]
	}
	for j, k := range keys {
		g := of(k)
		g.keys, g.entries = append(g.keys, k), append(g.entries, entries[j*settleArgs:(j+1)*settleArgs]...)
	}
	if idKey != "" {
		g := of(idKey)
		g.keys, g.id = append(g.keys, idKey), true
	}
	calls := make([]call, len(groups))
	for i, g := range groups {
		mode, r := idNone, ""
		if g.id {
			mode, r = idMode, rec
		}
		calls[i] = call{keys: g.keys, args: s.settleArgs(now, mode, hold, g.entries, r)}
	}
	return calls
}

// callAll runs calls of one slot each at once: through their nodes'
// batchers where there are, the others pipelined (callMulti). It returns,
// per call, the queued call of one still out at ctx's end (errLate), nil
// otherwise.
func (s *Store) callAll(ctx context.Context, calls []call) []*queued {
	out := make([]*queued, len(calls))
	bs := make([]*batcher, len(calls))
	var rest []call
	var at []int
	for i := range calls {
		c := &calls[i]
		if bs[i] = s.batcherOf(c.keys[0]); bs[i] != nil {
			out[i] = bs[i].submit(ctx, c.keys, c.args, c.compact)
		} else if multi := s.cluster && multiSlot(c.keys); multi || c.compact != nil {
			// Of a node no longer known: alone, as a node call or a
			// batch of one.
			w := &queued{keys: c.keys, args: c.args, compact: c.compact, multi: multi}
			s.callBatch(ctx, []*queued{w})
			c.reply, c.packed, c.err = w.reply, w.packed, w.err
		} else {
			rest, at = append(rest, calls[i]), append(at, i)
		}
	}
	if len(rest) > 0 {
		s.callMulti(ctx, rest)
		for j, i := range at {
			calls[i] = rest[j]
		}
	}
	for i, q := range out {
		if q == nil {
			continue
		}
		w, err := bs[i].wait(ctx, q)
		calls[i].err = err
		if w != nil && err == nil {
			calls[i].reply, calls[i].packed = w.reply, w.packed
		}
		if !errors.Is(err, errLate) {
			out[i] = nil
		}
	}
	return out
}

// rollbackLate waits for the answer of the reserve c of n items, out at
// its request's deadline (w), and rolls back what it charged; first: the
// request's first slot, which holds its id's claim.
func (s *Store) rollbackLate(now, hold string, c call, w *queued, n int, first bool) {
	<-w.done
	c.reply, c.packed, c.err = w.reply, w.packed, w.err
	g := s.parseGroup(c, n)
	outcome := "uncharged"
	switch {
	case g.err != nil:
		outcome = "unknown"
	case g.kind == kindDecided && (len(g.entries(false)) > 0 || g.claimed):
		outcome = "refunded"
		s.settle(context.Background(), now, hold, []call{c}, []groupReply{g}, false, first && g.claimed, "")
	}
	s.metrics.ambiguous.WithLabelValues(outcome).Inc()
}
