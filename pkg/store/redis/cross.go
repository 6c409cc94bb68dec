package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tokengate/tokengate/pkg/store"
)

// A request whose buckets live in several Cluster hash slots cannot be one
// script call. It is decided by a reserve and, when needed, a settle:
//
//  1. Reserve, one call per slot, all at once: each decides its own items
//     exactly as a whole request would. A slot whose items are all
//     allowed keeps its charges; a bucket whose net effect is a refund
//     keeps its uncharged balance instead (its refund is "deferred").
//     A slot that rejects charges nothing.
//  2. If every slot allowed, the request is allowed: deferred refunds are
//     added (a settle call only for slots that have some). Otherwise it is
//     rejected: every charge that a slot kept is added back (a settle call
//     for those slots).
//
// Adding back is exact: a charge of c undone later, with the cap at
// capacity, leaves the same balance as never charging, whatever was
// refilled or charged in between. So the store never oversells; what it
// can do is reject a concurrent request that found a bucket reserved by a
// request that is then rolled back (an under-sell, visible only while the
// two calls overlap). A settle that fails (Redis went away between the
// calls) leaves a charge in place or a refund unpaid: an under-sell again,
// logged and counted. With a request id, the first slot's call claims the
// id ("pending") and the settle writes the answer.

type groupReply struct {
	kind    int64
	rec     string
	allowed bool
	items   []itemRecord
	settle  []settleEntry
	claimed bool // the reserve claimed the request id
	err     error
}

func (s *Store) decideCross(ctx context.Context, req *store.Request, results []store.Result, tags []string, groups [][]int) (store.Outcome, error) {
	calls := make([]call, len(groups))
	for g, idx := range groups {
		keys := make([]string, len(idx), len(idx)+1)
		for k, i := range idx {
			keys[k] = s.bucketKey(tags[i])
		}
		idMode, fp := "0", ""
		if g == 0 && req.ID != "" {
			idMode, fp = "1", fingerprint(req.Items)
			keys = append(keys, s.idKey(tags[0], req.ID))
		}
		args := s.header(make([]string, 0, headerArgs+itemArgs*len(idx)), "r", req, idMode, len(idx), fp)
		for _, i := range idx {
			args = s.item(args, &req.Items[i], req.Now)
		}
		calls[g] = call{keys: keys, args: args}
	}
	s.callMulti(ctx, calls)

	replies := make([]groupReply, len(groups))
	var errs error
	for g := range calls {
		replies[g] = s.parseGroup(calls[g], len(groups[g]))
		errs = errors.Join(errs, replies[g].err)
	}
	first := replies[0]
	if errs != nil || first.kind != replyDecided {
		s.settle(ctx, req, calls, replies, false, first.err == nil && first.claimed, "")
		switch {
		case errs != nil:
			return store.Outcome{}, fmt.Errorf("redis: reserve in %d slots: %w", len(groups), errs)
		case first.kind == replyReplay:
			return s.fill(first.rec, true, results[:len(req.Items)])
		}
		return s.awaitReplay(ctx, req, results, calls[0].keys[len(calls[0].keys)-1])
	}

	allowed := true
	for g := range replies {
		allowed = allowed && replies[g].allowed
	}
	for g, idx := range groups {
		for k, i := range idx {
			it := replies[g].items[k]
			r := it.res
			if !allowed {
				if !r.Never {
					r.Remaining = it.remR
				}
				r.ResetAfter = it.resetR
			}
			results[i] = r
		}
	}
	var rec string
	if first.claimed {
		rec = string(appendRecord(nil, allowed, results[:len(req.Items)]))
	}
	s.settle(ctx, req, calls, replies, allowed, first.claimed, rec)
	return store.Outcome{Allowed: allowed}, nil
}

func (s *Store) parseGroup(c call, n int) groupReply {
	if c.err != nil {
		return groupReply{err: c.err}
	}
	kind, rec, err := s.replyHead(c.reply)
	r := groupReply{kind: kind, rec: rec, err: err}
	if err != nil || kind != replyDecided {
		return r
	}
	r.items = make([]itemRecord, n)
	if r.allowed, r.err = parseRecord(rec, r.items, 7); r.err != nil {
		return r
	}
	if len(c.reply) > 4 {
		str, _ := c.reply[3].ToString()
		r.settle, r.err = parseSettle(str)
		claimed, _ := c.reply[4].ToString()
		r.claimed = claimed == "1"
	}
	return r
}

// settle sends, to every slot that needs it, the commits (allowed) or the
// rollbacks (not allowed) of its reserve; to the first slot also the
// request id's answer (rec) or, without one, the release of its claim.
func (s *Store) settle(ctx context.Context, req *store.Request, calls []call, replies []groupReply, allowed, claimed bool, rec string) {
	var settles []call
	var kinds []string
	for g := range replies {
		r := &replies[g]
		var keys, entries []string
		for _, e := range r.settle {
			if e.commit != allowed {
				continue
			}
			isNew := "0"
			if e.isNew {
				isNew = "1"
			}
			keys = append(keys, calls[g].keys[e.index])
			entries = append(entries, e.units, e.per, isNew)
		}
		idMode := "0"
		if g == 0 && claimed {
			idMode = "2"
			if rec != "" {
				idMode = "1"
			}
			keys = append(keys, calls[0].keys[len(calls[0].keys)-1])
		}
		if len(entries) == 0 && idMode == "0" {
			continue
		}
		n := len(entries) / settleArgs
		args := s.header(make([]string, 0, headerArgs+len(entries)+1), "s", req, idMode, n, "")
		args = append(args, entries...)
		if idMode == "1" {
			args = append(args, rec)
		}
		settles = append(settles, call{keys: keys, args: args})
		kind := "rollback"
		if allowed {
			kind = "commit"
		}
		kinds = append(kinds, kind)
	}
	if len(settles) == 0 {
		return
	}
	// The reserve may have used most of the budget: settles get their own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	s.callMulti(sctx, settles)
	for i, c := range settles {
		result := "ok"
		if c.err == nil {
			_, _, c.err = s.replyHead(c.reply)
		}
		if c.err != nil {
			result = "error"
			s.opts.Logger.Warn("redis: settle of a cross-slot request failed: a charge stays or a refund is lost (never an oversell)",
				slog.String("kind", kinds[i]), slog.String("error", c.err.Error()))
		}
		s.metrics.settles.WithLabelValues(kinds[i], result).Inc()
	}
}
