package redis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// This file decodes what the script answers (layouts in contract.go) and
// encodes and decodes replay records; lua/codec.lua and lua/ops.lua are
// the other side.

// reply is a decoded script reply.
type reply struct {
	kind    int64
	allowed bool
	record  string // a replay's record
	forgot  string // biased cursor, or ""
	settle  string
	claimed bool
}

// itemRecord is one item of a reply or a record.
type itemRecord struct {
	res store.Result
	// snapshot: a rejected decide's bucket in plain numbers under the
	// item's version; extra1 and extra2 are its fraction and its cursor
	// ahead of the script's now. For a reserve they are its remaining and
	// reset should the request be rejected.
	snapshot       bool
	extra1, extra2 int64
}

// decodeReply reads a reply's head and, for a decided one, its items.
func decodeReply(msgs []rueidis.RedisMessage, items []itemRecord) (reply, error) {
	var r reply
	if len(msgs) == 0 {
		return r, errors.New("redis: empty reply")
	}
	var err error
	if r.kind, err = msgs[replyKind].AsInt64(); err != nil {
		return r, fmt.Errorf("redis: reply kind: %w", err)
	}
	switch r.kind {
	case kindPending:
		return r, nil
	case kindReplay:
		if len(msgs) <= replyRecord {
			return r, errors.New("redis: replay without its record")
		}
		r.record, err = msgs[replyRecord].ToString()
		return r, err
	case kindDecided:
	default:
		return r, fmt.Errorf("redis: reply kind %d", r.kind)
	}
	if want := replyHead + replyItemFields*len(items); len(msgs) != want {
		return r, fmt.Errorf("redis: reply of %d values, want %d", len(msgs), want)
	}
	allowed, err := msgs[replyAllowed].AsInt64()
	claimed, err2 := msgs[replyClaimed].AsInt64()
	r.forgot, _ = msgs[replyForgot].ToString()
	r.settle, _ = msgs[replySettle].ToString()
	if err = errors.Join(err, err2); err != nil {
		return r, fmt.Errorf("redis: reply head: %w", err)
	}
	r.allowed, r.claimed = allowed == 1, claimed == 1
	for i := range items {
		var v [replyItemFields]int64
		for f := range v {
			if v[f], err = msgs[replyHead+i*replyItemFields+f].AsInt64(); err != nil {
				return r, fmt.Errorf("redis: reply item %d field %d: %w", i, f, err)
			}
		}
		items[i] = itemOf(v)
	}
	return r, nil
}

// decodePacked reads a packed reply (contract.go) of len(items) items.
func decodePacked(p string, items []itemRecord) (reply, error) {
	if want := 8 * (1 + replyItemFields*len(items)); len(p) != want {
		return reply{}, fmt.Errorf("redis: packed reply of %d bytes, want %d", len(p), want)
	}
	at := func(i int) int64 {
		return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(p[8*i : 8*i+8]))))
	}
	r := reply{kind: kindDecided, allowed: at(0) == 1}
	for i := range items {
		var v [replyItemFields]int64
		for f := range v {
			v[f] = at(1 + i*replyItemFields + f)
		}
		items[i] = itemOf(v)
	}
	return r, nil
}

// itemOf is an item's reply fields as an itemRecord.
func itemOf(v [replyItemFields]int64) itemRecord {
	r := itemRecord{
		res:      result(v[replyFlags], v[replyRemaining], v[replyRetry], v[replyReset]),
		snapshot: v[replyFlags]&flagSnapshot != 0,
		extra1:   v[replyExtra1], extra2: v[replyExtra2],
	}
	if v[replyFlags]&flagReport != 0 {
		r.res.Forgiven = v[replyExtra1]
	}
	return r
}

// result is an item's answer from its flags, its balance's whole tokens
// (signed: below zero, a debt), retry and reset.
func result(flags, tokens, retry, reset int64) store.Result {
	return store.Result{Result: bucket.Result{Allowed: flags&flagAllowed != 0, Never: flags&flagNever != 0,
		Remaining: max(tokens, 0), Debt: max(-tokens, 0), RetryAfter: retry}, ResetAfter: reset}
}

// recordFields are an item's fields in a replay record: the reply's
// first ones, and a report's Forgiven when it is not 0.
const recordFields = replyReset + 1

// A record is a decision as kept under a request id for replays:
// "A|item|item..." with A 1 when the request was allowed and each item
// "flags,remaining,retry,reset" (remaining signed, as in the reply),
// then ",forgiven" for a report that forgave some of its cost. The script
// writes it (lua/codec.lua's record) for a decide; appendRecord writes it
// for a cross-slot request.

// parseRecord reads a record of len(results) items.
func parseRecord(rec string, results []store.Result) (bool, error) {
	head, rest, _ := strings.Cut(rec, recordSep)
	if head != "0" && head != "1" {
		return false, fmt.Errorf("redis: bad record %q", rec)
	}
	for i := range results {
		var it string
		if i == len(results)-1 {
			it, rest = rest, ""
		} else {
			it, rest, _ = strings.Cut(rest, recordSep)
		}
		var v [recordFields + 1]int64
		for f := range v {
			if f == recordFields && it == "" {
				break // no Forgiven
			}
			var x string
			x, it, _ = strings.Cut(it, fieldSep)
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return false, fmt.Errorf("redis: bad record %q: item %d field %d: %w", rec, i, f, err)
			}
			v[f] = n
		}
		if it != "" {
			return false, fmt.Errorf("redis: bad record %q: item %d has more than %d fields", rec, i, recordFields+1)
		}
		results[i] = result(v[replyFlags], v[replyRemaining], v[replyRetry], v[replyReset])
		results[i].Forgiven = v[recordFields]
	}
	if rest != "" {
		return false, fmt.Errorf("redis: record %q has more than %d items", rec, len(results))
	}
	return head == "1", nil
}

// appendRecord encodes a decision as a record.
func appendRecord(b []byte, allowed bool, results []store.Result) []byte {
	if allowed {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	for _, r := range results {
		var flags int64
		if r.Allowed {
			flags |= flagAllowed
		}
		if r.Never {
			flags |= flagNever
		}
		b = append(b, recordSep...)
		fields := [recordFields + 1]int64{flags, r.Remaining - r.Debt, r.RetryAfter, r.ResetAfter, r.Forgiven}
		n := recordFields
		if r.Forgiven != 0 {
			n++
		}
		for f, x := range fields[:n] {
			if f > 0 {
				b = append(b, fieldSep...)
			}
			b = strconv.AppendInt(b, x, 10)
		}
	}
	return b
}

// settleEntry is what a reserve asks to be settled for one bucket:
// "index,dir,units,per,new,hold" with dir "u" (undo: add back if the
// request is rejected) or "c" (commit: add if it is allowed), and hold an
// undo's reservation of the request to remove (its tokens), or "".
type settleEntry struct {
	index            int // the item (in the call) whose key is the bucket
	commit           bool
	units, per, hold string
	isNew            bool
}

func parseSettle(s string) ([]settleEntry, error) {
	if s == "" {
		return nil, nil
	}
	var out []settleEntry
	for e := range strings.SplitSeq(s, chainSep) {
		f := strings.Split(e, fieldSep)
		if len(f) != 6 {
			return nil, fmt.Errorf("redis: bad settle entry %q", e)
		}
		i, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("redis: bad settle entry %q", e)
		}
		out = append(out, settleEntry{index: i - 1, commit: f[1] == "c", units: f[2], per: f[3], isNew: f[4] == "1", hold: f[5]})
	}
	return out, nil
}
