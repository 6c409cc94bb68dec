package redis

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/tokengate/tokengate/pkg/store"
)

// Compact calls. A decide without a request id (the usual call) goes to
// Redis as one packed argument: its instant, floor and items as doubles,
// each item naming its version by number. Its store's constants (a
// context) and its versions' arguments go once per batch, however many
// calls use them (contract.go: batch arguments). Redis turns every
// argument into a Lua string, and a call laid out alone has 12 header
// arguments and 7 per item: most of a one-bucket decision's cost in the
// script. The lean path (lua/lean.lua) decides from the packed argument;
// any other case lays the call out as alone, in the script, and takes the
// general path, which answers the same.

// compactItem is one item of a compact call; horizon is the instant, on
// the script's clock, its version's buckets expire (its itemHorizon in a
// batch's version table), or "".
type compactItem struct {
	v       *versionArgs
	rev     int64
	cost    int64
	per     int64 // its rate's period, in ns
	charge  store.Charge
	horizon string
}

// compactCall is a decide call to be packed when its batch is sent.
type compactCall struct {
	s        *Store
	now      uint64 // the script's instant
	floor    uint64
	hasFloor bool
	distinct bool // no two items share a bucket
	reserve  bool // a cross-node request's part (cross.go)
	items    []compactItem
	small    [4]compactItem // items, when that few
}

// maxExact bounds the values a double holds exactly.
const maxExact = 1 << 53

// compactDecide is req's decide call at the script's instant now in
// compact form, or nil when it cannot take one: a request id, a cost a
// double does not hold exactly, or an activation or horizon the script's
// clock cannot hold.
func (s *Store) compactDecide(req *store.Request, raw [][16]byte, now uint64) *compactCall {
	if req.ID != "" {
		return nil
	}
	return s.compactOf(req, nil, raw, now)
}

// compactReserve is the reserve of the items idx of req (raw: their hash
// tags) in compact form, or nil when it cannot take one: as for
// compactDecide, or a refund, which a reserve defers to its settle.
func (s *Store) compactReserve(req *store.Request, idx []int, raw [][16]byte, now uint64) *compactCall {
	if req.ID != "" {
		return nil
	}
	for _, i := range idx {
		if it := &req.Items[i]; it.Charge == store.Prepaid && it.Cost < 0 {
			return nil
		}
	}
	c := s.compactOf(req, idx, raw, now)
	if c != nil {
		c.reserve = true
	}
	return c
}

// compactOf is the compact call of req's items idx (nil: all of them),
// raw their hash tags.
func (s *Store) compactOf(req *store.Request, idx []int, raw [][16]byte, now uint64) *compactCall {
	c := &compactCall{s: s, now: now, distinct: distinct(raw)}
	n := len(raw)
	if n <= len(c.small) {
		c.items = c.small[:n]
	} else {
		c.items = make([]compactItem, n)
	}
	for i := range n {
		it := &req.Items[i]
		if idx != nil {
			it = &req.Items[idx[i]]
		}
		if it.Cost >= maxExact || it.Cost <= -maxExact {
			return nil
		}
		v := s.versions.get(it.Version, s.pid)
		if !s.opts.RequestTime {
			if _, ok := s.shared(v.activeAt); !ok {
				return nil
			}
		}
		c.items[i] = compactItem{v: v, rev: it.Revision, cost: it.Cost, per: int64(it.Version.Params.Rate().Per()), charge: it.Charge}
		if h := it.Version.Horizon; h != nil {
			// A calendar budget's: the end of the request's period.
			var ok bool
			if c.items[i].horizon, ok = s.scriptInstant(h.End(req.Now)); !ok {
				return nil
			}
		}
	}
	if s.opts.RequestTime {
		if f := s.forgot.Load(); f != minInt64 {
			c.floor, c.hasFloor = bias(f), true
		}
	}
	return c
}

// undo are the settle entries of a reserve the lean path allowed: each
// charged item's cost, added back should the request be refused
// (cross.go). The lean path decides only versions in plain numbers,
// whose balances in units stay below 2^52 (lua/fast.lua), and an allowed
// cost is at most the capacity: cost × per is exact.
func (c *compactCall) undo() []settleEntry {
	var out []settleEntry
	for k := range c.items {
		if it := &c.items[k]; it.charge == store.Prepaid && it.cost > 0 {
			out = append(out, settleEntry{index: k, units: strconv.FormatInt(it.cost*it.per, 10), per: strconv.FormatInt(it.per, 10)})
		}
	}
	return out
}

// distinct reports whether no two tags are equal.
func distinct(tags [][16]byte) bool {
	if len(tags) > 16 {
		seen := make(map[[16]byte]struct{}, len(tags))
		for _, t := range tags {
			if _, dup := seen[t]; dup {
				return false
			}
			seen[t] = struct{}{}
		}
		return true
	}
	for i := range tags {
		for j := range i {
			if tags[i] == tags[j] {
				return false
			}
		}
	}
	return true
}

// scriptInstant is instant x of this process's clock on the script's
// clock, as a signed decimal: biased with RequestTime, else on the shared
// clock (clock.go); false when that overflows.
func (s *Store) scriptInstant(x int64) (string, bool) {
	if s.opts.RequestTime {
		return biased(x), true
	}
	y, ok := s.shared(x)
	return strconv.FormatInt(y, 10), ok
}

// shared is instant x of this process's clock on the shared clock; false
// when that overflows.
func (s *Store) shared(x int64) (int64, bool) {
	off := s.clock.offset.Load()
	y := x + off
	return y, !(off > 0 && y < x || off < 0 && y > x)
}

// batchTables numbers the contexts (stores) and versions of a batch's
// compact calls, in order of first use.
type batchTables struct {
	stores   []*Store
	versions []batchVersion
}

// batchVersion is a version of a batch's items: one per version,
// revision, charge and horizon (items of one calendar budget in two
// periods differ), the charge traveling in its block (itemMode).
type batchVersion struct {
	s       *Store
	v       *versionArgs
	rev     int64
	charge  store.Charge
	horizon string
}

func (t *batchTables) store(s *Store) int {
	for i, x := range t.stores {
		if x == s {
			return i + 1
		}
	}
	t.stores = append(t.stores, s)
	return len(t.stores)
}

func (t *batchTables) version(s *Store, it *compactItem) int {
	for i, x := range t.versions {
		if x.v == it.v && x.rev == it.rev && x.charge == it.charge && x.horizon == it.horizon {
			return i + 1
		}
	}
	t.versions = append(t.versions, batchVersion{s, it.v, it.rev, it.charge, it.horizon})
	return len(t.versions)
}

// pack is c's one argument (contract.go: callFormat, callItemFormat),
// numbering its context and versions in t.
func (c *compactCall) pack(t *batchTables) string {
	b := make([]byte, 0, 8*(7+2*len(c.items)))
	fh, fl := -1.0, 0.0
	if c.hasFloor {
		fh, fl = float64(c.floor/1e9), float64(c.floor%1e9)
	}
	d := 0.0
	if c.distinct {
		d = 1
	}
	if c.reserve {
		d += callReserve
	}
	b = appendDoubles(b, float64(t.store(c.s)), float64(c.now/1e9), float64(c.now%1e9), fh, fl, float64(len(c.items)), d)
	for i := range c.items {
		it := &c.items[i]
		b = appendDoubles(b, float64(t.version(c.s, it)), float64(it.cost))
	}
	return string(b)
}

// appendDoubles appends xs as little-endian doubles (struct's "<d").
func appendDoubles(b []byte, xs ...float64) []byte {
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// appendTables appends t's contexts (each store's header, its per-call
// fields empty) and versions (each an item's block with no cost and its
// activation and horizon on the script's clock).
func (t *batchTables) appendTables(args []string) []string {
	for _, s := range t.stores {
		n := len(args)
		args = s.header(args, opDecide, "", idNone, 0, "", "")
		args[n+argFloor-1], args[n+argItems-1] = "", ""
	}
	for _, x := range t.versions {
		act, _ := x.s.scriptInstant(x.v.activeAt)
		args = x.v.block(args, "", act, x.rev, x.charge, x.horizon)
	}
	return args
}
