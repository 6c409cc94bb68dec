package redis

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// A record is a decision as the script writes it, and as it is kept under
// a request id for replays: "A|item|item..." with A "1" when the request
// was allowed and each item "allowed,never,remaining,retryAfter,resetAfter"
// (a reserve adds "remainingIfRejected,resetIfRejected").

// itemRecord is one item of a record.
type itemRecord struct {
	res          store.Result
	remR, resetR int64 // a reserve's answer should the request be rejected
}

// parseRecord reads a record with want items of fields fields each.
func parseRecord(rec string, items []itemRecord, fields int) (bool, error) {
	head, rest, _ := strings.Cut(rec, "|")
	if head != "0" && head != "1" {
		return false, fmt.Errorf("redis: bad record %q", rec)
	}
	for i := range items {
		var it string
		if i == len(items)-1 {
			it, rest = rest, ""
		} else {
			it, rest, _ = strings.Cut(rest, "|")
		}
		var v [7]int64
		for f := range fields {
			var x string
			x, it, _ = strings.Cut(it, ",")
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return false, fmt.Errorf("redis: bad record %q: item %d field %d: %w", rec, i, f, err)
			}
			v[f] = n
		}
		items[i] = itemRecord{
			res:  store.Result{Result: bucket.Result{Allowed: v[0] == 1, Never: v[1] == 1, Remaining: v[2], RetryAfter: v[3]}, ResetAfter: v[4]},
			remR: v[5], resetR: v[6],
		}
	}
	if rest != "" {
		return false, fmt.Errorf("redis: record %q has more than %d items", rec, len(items))
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
	flag := func(v bool) byte {
		if v {
			return '1'
		}
		return '0'
	}
	for _, r := range results {
		b = append(b, '|', flag(r.Allowed), ',', flag(r.Never), ',')
		b = strconv.AppendInt(b, r.Remaining, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, r.RetryAfter, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, r.ResetAfter, 10)
	}
	return b
}

// settleEntry is what a reserve asks to be settled for one bucket:
// "index,dir,units,per,new" with dir "u" (undo: add back if the request
// is rejected) or "c" (commit: add if it is allowed).
type settleEntry struct {
	index      int // the item (in the call) whose key is the bucket
	commit     bool
	units, per string
	isNew      bool
}

func parseSettle(s string) ([]settleEntry, error) {
	if s == "" {
		return nil, nil
	}
	var out []settleEntry
	for e := range strings.SplitSeq(s, ";") {
		f := strings.Split(e, ",")
		if len(f) != 5 {
			return nil, fmt.Errorf("redis: bad settle entry %q", e)
		}
		i, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("redis: bad settle entry %q", e)
		}
		out = append(out, settleEntry{index: i - 1, commit: f[1] == "c", units: f[2], per: f[3], isNew: f[4] == "1"})
	}
	return out, nil
}
