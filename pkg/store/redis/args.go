package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// The script's arguments are laid out in contract.go; this file encodes
// them. A version chain (an item's earlier versions, nearest first) is
// "vid,cap,n,per,mode,offset;..." with offset the ns from that version's
// activation to the item's version's.

// bias maps an int64 instant to a uint64 in the same order, so that the
// script's non-negative arithmetic handles negative instants too.
func bias(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

func unbias(u uint64) int64 { return int64(u ^ 1<<63) }

func biased(ns int64) string { return strconv.FormatUint(bias(ns), 10) }

// offset is a - b as a signed decimal, exact for every pair of int64s.
func offset(a, b int64) string {
	ua, ub := bias(a), bias(b)
	if ua >= ub {
		return strconv.FormatUint(ua-ub, 10)
	}
	return "-" + strconv.FormatUint(ub-ua, 10)
}

// versionArgs are a version's arguments, formatted once per version:
// params is its part of an item's version string (the revision is the
// request's), tail its part of the identity after the version string,
// fast its packed parameters (or ""), modes its itemMode by charge;
// activeAt is the version's.
type versionArgs struct {
	params, tail, fast, chain string
	modes                     [3]string // by store.Charge
	activeAt                  int64
}

func encodeVersion(v *bucket.Version, pid string) *versionArgs {
	a := &versionArgs{activeAt: v.ActiveAt}
	capacity, n, per, mode := encodeParams(v)
	a.params = verSep + strings.Join([]string{capacity, n, per}, verSep) + verSep
	a.modes = [3]string{store.Prepaid: mode, store.Check: mode + chargeCheck, store.Report: mode + chargeReport}
	a.tail = pid + verSep + strconv.FormatUint(v.ID, 10)
	a.fast = packFast(v.Params)
	var chain []string
	for p := v.Prev(); p != nil; p = p.Prev() {
		c, n, per, mode := encodeParams(p)
		chain = append(chain, strings.Join([]string{strconv.FormatUint(p.ID, 10), c, n, per, mode, offset(v.ActiveAt, p.ActiveAt)}, fieldSep))
	}
	a.chain = strings.Join(chain, chainSep)
	return a
}

// packFast packs p as fastFormat when (capacity+max debt)*period <
// fastLimit, the condition under which the script's plain-number path is
// exact (lua/fast.lua): a balance lies between -max debt and capacity.
// A budget's (bucket.NewBudget, rate 0) period is 1, as the script's
// bignum path takes it (lua/codec.lua, bigparams): its balance has no
// fraction.
func packFast(p bucket.Params) string {
	c, d, n, per := uint64(p.Capacity()), uint64(p.MaxDebt()), uint64(p.Rate().Tokens()), uint64(max(p.Rate().Per(), 1))
	if hi, lo := bits.Mul64(c+d, per); hi != 0 || lo >= fastLimit {
		return ""
	}
	return string(appendDoubles(make([]byte, 0, 32), float64(c), float64(n), float64(per), float64(d)))
}

// encodeParams are v's parameters as the script reads them: the capacity
// with its debt bound (debtSep), the rate, and its on_resize.
func encodeParams(v *bucket.Version) (capacity, n, per, mode string) {
	p := v.Params
	capacity = strconv.FormatInt(p.Capacity(), 10)
	if d := p.MaxDebt(); d > 0 {
		capacity += debtSep + strconv.FormatInt(d, 10)
	}
	return capacity, strconv.FormatInt(p.Rate().Tokens(), 10), strconv.FormatInt(int64(p.Rate().Per()), 10), v.OnResize.String()
}

// versionCache keeps each live version's formatted arguments. It holds
// versions weakly: an entry goes when its version is collected, so the
// cache is bounded by the versions the policies still use.
type versionCache struct {
	mu sync.RWMutex
	m  map[weak.Pointer[bucket.Version]]*versionArgs
}

func (c *versionCache) get(v *bucket.Version, pid string) *versionArgs {
	wp := weak.Make(v)
	c.mu.RLock()
	a := c.m[wp]
	c.mu.RUnlock()
	if a != nil {
		return a
	}
	a = encodeVersion(v, pid)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[wp]; old != nil {
		return old
	}
	if c.m == nil {
		c.m = make(map[weak.Pointer[bucket.Version]]*versionArgs)
	}
	c.m[wp] = a
	runtime.AddCleanup(v, c.drop, wp)
	return a
}

func (c *versionCache) drop(wp weak.Pointer[bucket.Version]) {
	c.mu.Lock()
	delete(c.m, wp)
	c.mu.Unlock()
}

// tagBytes is the hash tag of a bucket: 128 bits of SHA-256 of its key
// (the store writes it in hex).
// A collision-resistant hash, because the key holds client-controlled
// values and two keys sharing a tag would share a bucket.
func tagBytes(key string) [16]byte {
	sum := sha256.Sum256([]byte(key))
	return [16]byte(sum[:16])
}

// bucketKeys are the keys of the buckets of tags raw, with room for one
// more (a request id's).
func (s *Store) bucketKeys(raw [][16]byte) []string {
	keys := make([]string, len(raw), len(raw)+1)
	for i := range raw {
		keys[i] = s.bucketKey(raw[i])
	}
	return keys
}

// bucketKey is the Redis key of the bucket of tag t: prefix{tag}, the tag
// in hex, in one allocation. The braces make the tag alone pick the
// Cluster hash slot.
func (s *Store) bucketKey(t [16]byte) string {
	var h [32]byte
	hex.Encode(h[:], t[:])
	var b strings.Builder
	b.Grow(len(s.opts.KeyPrefix) + len(h) + 2)
	b.WriteString(s.opts.KeyPrefix)
	b.WriteByte('{')
	b.Write(h[:])
	b.WriteByte('}')
	return b.String()
}

// idKey is the Redis key of a request id's answer to the request of
// fingerprint fp (hex), in the slot of the request's first bucket (so
// that the first call can check it). The fingerprint is part of the key,
// as the memory store keys its table, so that one id asking for other
// buckets or costs (a check, then its report) is remembered apart.
func (s *Store) idKey(t [16]byte, id, fp string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + fp))
	return s.bucketKey(t) + ":id:" + hex.EncodeToString(sum[:16])
}

// header appends the header arguments; hold is holdName's.
func (s *Store) header(args []string, op, now, idMode string, n int, fp, hold string) []string {
	floor, expire := "", "1"
	if s.opts.RequestTime {
		expire = "0"
		if f := s.forgot.Load(); f != minInt64 {
			floor = biased(f)
		}
	}
	return append(args, op, now, floor, expire, s.pid, idMode, s.windowMs, s.pendingMs, strconv.Itoa(n), fp, maxReplays, s.toleranceMs, hold)
}

// holdName is the name of req's reservations (argHold): 128 bits of the
// SHA-256 of its id, in hex, when an item may hold or settle one (a
// check that reserves, a report); else "", and the script touches none.
func holdName(req *store.Request) string {
	if req.ID == "" {
		return ""
	}
	for i := range req.Items {
		if it := &req.Items[i]; it.Reserve > 0 || it.Charge == store.Report {
			sum := sha256.Sum256([]byte(req.ID))
			return hex.EncodeToString(sum[:16])
		}
	}
	return ""
}

// instant is the script's now for req: the request's own instant, biased,
// with RequestTime; else its instant on the shared clock (clock.go), which
// is positive and needs no bias.
func (s *Store) instant(ctx context.Context, req *store.Request) (uint64, error) {
	if s.opts.RequestTime {
		return bias(req.Now), nil
	}
	now, err := s.now(ctx, req.Now)
	if err != nil {
		return 0, err
	}
	if now < 0 {
		return 0, fmt.Errorf("redis: instant %d is before the shared clock's epoch", req.Now)
	}
	return uint64(now), nil
}

var maxReplays = strconv.Itoa(store.MaxReplays)

// fingerprint is store.Fingerprint as the script compares it.
func fingerprint(items []store.Item) string {
	fp := store.Fingerprint(items)
	return hex.EncodeToString(fp[:])
}

// item appends an item's arguments.
func (s *Store) item(args []string, it *store.Item, now int64) []string {
	v := s.versions.get(it.Version, s.pid)
	horizon := ""
	if h := it.Version.Horizon; h != nil {
		horizon = offset(h.End(now), now)
	}
	args = v.block(args, strconv.FormatInt(it.Cost, 10), offset(now, it.Version.ActiveAt), it.Revision, it.Charge, horizon)
	if it.Reserve > 0 {
		// A check that reserves (chargeReserve): the tokens as its cost,
		// its lifetime after the charge.
		n := len(args)
		args[n-itemArgs+itemCost-1] = strconv.FormatInt(it.Reserve, 10)
		args[n-itemArgs+itemMode-1] = v.modes[store.Prepaid] + chargeReserve + strconv.FormatInt(it.ReserveTTL, 10)
	}
	return args
}

// block appends the arguments of an item of charge c under v at revision
// rev, its buckets expiring horizon ns from now ("": when full).
func (v *versionArgs) block(args []string, cost, at string, rev int64, c store.Charge, horizon string) []string {
	ver := strconv.FormatInt(rev, 10) + v.params
	return append(args, cost, at, ver+v.tail, ver, v.fast, v.modes[c], v.chain, horizon)
}
