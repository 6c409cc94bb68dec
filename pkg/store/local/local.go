// Package local is the bounded in-memory budget that a rule with
// on_store_error: local decides from while the shared store (Redis) fails.
//
// Each replica gets a share of every rule: its capacity and its refill
// rate multiplied by Options.Share (say 1/replicas, so that all replicas
// together stay within the quota during an outage), rounded down, with at
// least one token of capacity. Buckets live in a memory.Store, so the
// budget is exact, bounded (MaxBuckets) and forgets full buckets. It starts
// full when the outage starts, and what it charged is not carried back to
// Redis when Redis returns.
//
// Store is safe for concurrent use.
package local

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/memory"
)

// Options configure a Store.
type Options struct {
	// Share of each rule's capacity and rate, in (0, 1] [1]; read to
	// three decimal places.
	Share float64
	// Memory configures the underlying memory store.
	Memory memory.Options
}

// Store decides requests against scaled copies of their rules.
type Store struct {
	mem        *memory.Store
	milli      int64 // the share in thousandths, in [1, 1000]
	mu         sync.Mutex
	byLineage  map[*bucket.Lineage]*scaled
	itemsCache sync.Pool
}

// scaled is the local version that mirrors a rule's current version.
type scaled struct {
	src   *bucket.Version
	local *bucket.Version
}

var _ store.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts Options) (*Store, error) {
	if opts.Share == 0 {
		opts.Share = 1
	}
	if !(opts.Share > 0 && opts.Share <= 1) {
		return nil, fmt.Errorf("local: share %v: want a fraction in (0, 1]", opts.Share)
	}
	milli := max(int64(opts.Share*1000+0.5), 1)
	s := &Store{mem: memory.New(opts.Memory), milli: milli, byLineage: map[*bucket.Lineage]*scaled{}}
	s.itemsCache.New = func() any { return new([]store.Item) }
	return s, nil
}

// Decide implements store.Store on the scaled rules.
func (s *Store) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	p := s.itemsCache.Get().(*[]store.Item)
	defer s.itemsCache.Put(p)
	items := append((*p)[:0], req.Items...)
	*p = items
	for i := range items {
		if items[i].Version != nil {
			items[i].Version = s.version(items[i].Version)
		}
	}
	local := *req
	local.Items = items
	return s.mem.Decide(ctx, &local, results)
}

// Run sweeps the memory store every interval until ctx ends.
func (s *Store) Run(ctx context.Context, interval time.Duration) { s.mem.Run(ctx, interval) }

// version returns the local version for v: a scaled copy of v's chain,
// so that a rule change reaches the local buckets as the same transitions
// (activations, on_resize, the versions in between) it makes elsewhere.
func (s *Store) version(v *bucket.Version) *bucket.Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	lin := v.Lineage()
	e := s.byLineage[lin]
	switch {
	case e == nil:
		e = &scaled{src: v, local: s.mirror(v, nil, 0)}
		s.byLineage[lin] = e
		s.forgetRemoved()
	case v.ID > e.src.ID:
		e.local, e.src = s.mirror(v, e.local, e.src.ID), v
	case v.ID < e.src.ID:
		// An older version (a request that began before a reload).
		for l := e.local; l != nil; l = l.Prev() {
			if l.ID == v.ID {
				return l
			}
		}
		return s.mirror(v, nil, 0)
	}
	e.local.Lineage().Publish(e.local)
	return e.local
}

// mirror returns the scaled copy of v's chain: the versions of v's history
// newer than afterID, oldest first, appended to base (a new lineage when
// base is nil).
func (s *Store) mirror(v, base *bucket.Version, afterID uint64) *bucket.Version {
	var path []*bucket.Version
	for p := v; p != nil && (base == nil || p.ID > afterID); p = p.Prev() {
		path = append(path, p)
	}
	l := base
	for i := len(path) - 1; i >= 0; i-- {
		p := path[i]
		if l == nil {
			l = bucket.NewVersion(p.ID, s.scale(p.Params), p.ActiveAt)
		} else {
			l = l.Next(p.ID, s.scale(p.Params), p.ActiveAt, p.OnResize)
		}
		l.Horizon = p.Horizon // a calendar budget's buckets expire here too
	}
	return l
}

// forgetRemoved drops the entries of rules that left the policy.
func (s *Store) forgetRemoved() {
	for lin := range s.byLineage {
		if lin.Removed() {
			delete(s.byLineage, lin)
		}
	}
}

// scale returns p with capacity, rate and debt bound times the share,
// rounded down; a budget's (bucket.NewBudget) stays a budget.
func (s *Store) scale(p bucket.Params) bucket.Params {
	capacity := max(p.Capacity()*s.milli/1000, 1) // capacity <= 10^15, milli <= 1000: no overflow
	if !p.Refills() {
		out, err := bucket.NewBudget(capacity)
		return s.withDebt(p, out, err)
	}
	r := p.Rate()
	tokens := new(big.Int).Mul(big.NewInt(r.Tokens()), big.NewInt(s.milli))
	per := new(big.Int).Mul(big.NewInt(int64(r.Per())), big.NewInt(1000))
	g := new(big.Int).GCD(nil, nil, tokens, per)
	tokens.Quo(tokens, g)
	per.Quo(per, g)
	rate, err := bucket.Rate{}, fmt.Errorf("out of range")
	if tokens.IsInt64() && per.IsInt64() {
		rate, err = bucket.NewRate(tokens.Int64(), time.Duration(per.Int64()))
	}
	if err != nil {
		// Too fine a fraction: round down to whole tokens per second (or
		// per ns), or one token per a whole number of ns, rounded up. These
		// are in range; NewParams below checks the result all the same.
		perSec := new(big.Int).Quo(new(big.Int).Mul(tokens, big.NewInt(int64(time.Second))), per)
		switch {
		case perSec.Sign() > 0 && perSec.Cmp(big.NewInt(bucket.MaxRateTokens)) <= 0:
			rate, _ = bucket.NewRate(perSec.Int64(), time.Second)
		case perSec.Sign() > 0:
			perNs := new(big.Int).Quo(tokens, per)
			rate, _ = bucket.NewRate(min(perNs.Int64(), bucket.MaxRateTokens), 1)
		default:
			d := new(big.Int).Quo(new(big.Int).Add(per, new(big.Int).Sub(tokens, big.NewInt(1))), tokens)
			if !d.IsInt64() || d.Int64() > bucket.MaxRatePer {
				d.SetInt64(bucket.MaxRatePer)
			}
			rate, _ = bucket.NewRate(1, time.Duration(d.Int64()))
		}
	}
	out, err := bucket.NewParams(capacity, rate)
	return s.withDebt(p, out, err)
}

// withDebt is out with p's debt bound times the share, rounded down, or p
// itself should either fail (unreachable for a valid p).
func (s *Store) withDebt(p bucket.Params, out bucket.Params, err error) bucket.Params {
	if err == nil {
		out, err = out.WithMaxDebt(p.MaxDebt() * s.milli / 1000) // <= 10^15 * 1000: no overflow
	}
	if err != nil {
		return p // keep the rule's own parameters
	}
	return out
}
