package redis

import (
	"crypto/sha256"
	"encoding/hex"
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

// versionArgs are a version's arguments, formatted once per version.
// params is the version string without its revision (which is the
// request's): capacity, rate tokens and period.
type versionArgs struct {
	id, params, capacity, n, per, mode, chain string
}

func encodeVersion(v *bucket.Version) *versionArgs {
	a := &versionArgs{id: strconv.FormatUint(v.ID, 10)}
	a.capacity, a.n, a.per, a.mode = encodeParams(v)
	a.params = strings.Join([]string{a.capacity, a.n, a.per}, verSep)
	var chain []string
	for p := v.Prev(); p != nil; p = p.Prev() {
		c, n, per, mode := encodeParams(p)
		chain = append(chain, strings.Join([]string{strconv.FormatUint(p.ID, 10), c, n, per, mode, offset(v.ActiveAt, p.ActiveAt)}, fieldSep))
	}
	a.chain = strings.Join(chain, chainSep)
	return a
}

// versionString is what a bucket stores of the version it was decided
// under, and what an item is compared with: revision, then parameters.
func versionString(revision int64, a *versionArgs) string {
	return strconv.FormatInt(revision, 10) + verSep + a.params
}

func encodeParams(v *bucket.Version) (capacity, n, per, mode string) {
	p := v.Params
	return strconv.FormatInt(p.Capacity(), 10), strconv.FormatInt(p.Rate().Tokens(), 10),
		strconv.FormatInt(int64(p.Rate().Per()), 10), v.OnResize.String()
}

// versionCache keeps each live version's formatted arguments. It holds
// versions weakly: an entry goes when its version is collected, so the
// cache is bounded by the versions the policies still use.
type versionCache struct {
	mu sync.RWMutex
	m  map[weak.Pointer[bucket.Version]]*versionArgs
}

func (c *versionCache) get(v *bucket.Version) *versionArgs {
	wp := weak.Make(v)
	c.mu.RLock()
	a := c.m[wp]
	c.mu.RUnlock()
	if a != nil {
		return a
	}
	a = encodeVersion(v)
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

// tag is the hash tag of a bucket: 128 bits of SHA-256 of its key, in hex.
// A collision-resistant hash, because the key holds client-controlled
// values and two keys sharing a tag would share a bucket.
func tag(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// bucketKey is the Redis key of a bucket: prefix{tag}. The braces make the
// tag alone pick the Cluster hash slot.
func (s *Store) bucketKey(t string) string { return s.opts.KeyPrefix + "{" + t + "}" }

// idKey is the Redis key of a request id's answer, in the slot of the
// request's first bucket (so that the first call can check it).
func (s *Store) idKey(t, id string) string {
	sum := sha256.Sum256([]byte(id))
	return s.opts.KeyPrefix + "{" + t + "}:id:" + hex.EncodeToString(sum[:16])
}

// header appends the header arguments.
func (s *Store) header(args []string, op string, req *store.Request, idMode string, n int, fp string) []string {
	now, floor, expire := "", "", "1"
	if s.opts.RequestTime {
		now, expire = biased(req.Now), "0"
		if f := s.forgot.Load(); f != minInt64 {
			floor = biased(f)
		}
	}
	return append(args, op, now, floor, expire, s.pid, idMode, s.windowMs, s.pendingMs, strconv.Itoa(n), fp, maxReplays)
}

var maxReplays = strconv.Itoa(store.MaxReplays)

// fingerprint is store.Fingerprint as the script compares it.
func fingerprint(items []store.Item) string {
	fp := store.Fingerprint(items)
	return hex.EncodeToString(fp[:])
}

// item appends an item's arguments.
func (s *Store) item(args []string, it *store.Item, now int64) []string {
	v := s.versions.get(it.Version)
	at := offset(now, it.Version.ActiveAt)
	if !s.opts.RequestTime && now < it.Version.ActiveAt {
		// Redis TIME is the clock: a version is never active in its future.
		at = "0"
	}
	return append(args, strconv.FormatInt(it.Cost, 10), at, v.id, versionString(it.Revision, v),
		v.capacity, v.n, v.per, v.mode, v.chain)
}
