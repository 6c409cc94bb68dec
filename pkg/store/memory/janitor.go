package memory

import (
	"context"
	"time"
)

// Sweep returns the reservations expired by now, drops every bucket that
// carries no information at now (full, or its rule left the policy) and
// forgets expired request ids. It locks one
// shard at a time. It returns the number of buckets dropped.
func (s *Store) Sweep(now int64) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweepHolds(now)
		n += sh.sweep(now)
		sh.mu.Unlock()
	}
	s.replays.sweep(now)
	return n
}

// Run is the store's one janitor: it sweeps every interval until ctx ends.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep(s.opts.Clock.Now())
		}
	}
}

// Stats is a snapshot of the store's counters, for metrics.
type Stats struct {
	Buckets      int                // buckets stored now
	Dropped      [numReasons]uint64 // buckets dropped, by Reason
	Contended    uint64             // shard lock acquisitions that waited
	LockWait     time.Duration      // total time those waited
	Replays      uint64             // answers replayed for a repeated request id
	NotReplayed  uint64             // repeats decided anew: other items, or MaxReplays used up
	IDsForgotten uint64             // request ids forgotten before their window ended
	RequestIDs   int                // request ids remembered now
	// Reservations held now; of those held before, HoldsExpired were
	// returned unsettled at their expiry, HoldsDropped went with their
	// bucket (its rule left, the cap); HoldsRefused checks found no room
	// for theirs.
	Reservations                             int
	HoldsExpired, HoldsDropped, HoldsRefused uint64
}

// Stats locks each shard briefly to read its counters.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Buckets += sh.buckets.n
		for r := range sh.evicted {
			st.Dropped[r] += sh.evicted[r]
		}
		st.Reservations += len(sh.holds.byKey)
		st.HoldsExpired += sh.holds.expired
		st.HoldsDropped += sh.holds.dropped
		st.Contended += sh.contended
		st.LockWait += time.Duration(sh.waitNs)
		sh.mu.Unlock()
	}
	st.HoldsRefused = s.unheld.Load()
	for i := range s.replays.shards {
		sh := &s.replays.shards[i]
		sh.mu.Lock()
		st.Replays += sh.hits
		st.NotReplayed += sh.refused
		st.IDsForgotten += sh.early
		st.RequestIDs += sh.n
		sh.mu.Unlock()
	}
	return st
}
