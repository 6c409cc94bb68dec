package bucket

import "sync/atomic"

// MaxHistory is how many versions of one rule a Version remembers. A bucket
// last touched more than MaxHistory changes ago converts straight from its
// own version to the current one, skipping the refills in between.
const MaxHistory = 16

// Version is one immutable version of a rule's parameters: what a bucket was
// last refilled under. A store keeps a *Version per bucket and calls Bring
// before deciding, so parameter changes apply lazily, bucket by bucket, in
// the order they happened (docs/ARCHITECTURE.md, section 4).
//
// Versions of one rule share a Lineage, which tells a store the rule's
// current version and whether the rule was removed. A Version is safe for
// concurrent use.
type Version struct {
	ID       uint64     // increasing along a lineage
	Params   Params     // parameters in force from ActiveAt
	ActiveAt int64      // monotonic instant the version took effect
	OnResize ResizeMode // how a balance of the previous version converts
	// Horizon, when not nil, is when the version's buckets expire (a
	// calendar budget's); set before the version is published.
	Horizon Horizon
	prev    *Version // the version before, nil for the first
	lineage *Lineage
}

// Lineage ties the versions of one rule together.
type Lineage struct {
	current atomic.Pointer[Version]
	removed atomic.Bool
}

// Current is the version now in force.
func (l *Lineage) Current() *Version { return l.current.Load() }

// Removed reports whether the rule left the policy; its buckets may go.
func (l *Lineage) Removed() bool { return l.removed.Load() }

// Remove marks the rule as gone from the policy.
func (l *Lineage) Remove() { l.removed.Store(true) }

// Publish makes v the lineage's current version; call it when the policy
// holding v starts serving.
func (l *Lineage) Publish(v *Version) { l.current.Store(v) }

// NewVersion starts a new lineage with its first version. It is not
// published until Publish is called.
func NewVersion(id uint64, p Params, activeAt int64) *Version {
	return &Version{ID: id, Params: p, ActiveAt: activeAt, lineage: &Lineage{}}
}

// Next returns the version that follows v: params p from activeAt, a balance
// of v converting under mode. It shares v's lineage and remembers at most
// MaxHistory versions (older ones are copied out of the chain, never
// mutated, so concurrent readers of v are unaffected).
func (v *Version) Next(id uint64, p Params, activeAt int64, mode ResizeMode) *Version {
	return &Version{ID: id, Params: p, ActiveAt: activeAt, OnResize: mode, prev: v.trimmed(MaxHistory - 1), lineage: v.lineage}
}

// trimmed returns a copy of the chain from v with at most n versions.
func (v *Version) trimmed(n int) *Version {
	if v == nil || n == 0 {
		return nil
	}
	c := *v
	c.prev = v.prev.trimmed(n - 1)
	return &c
}

// Prev is the version before v in its remembered history: nil for the
// first version of a lineage, or past MaxHistory. A store that keeps
// versions outside the process (Redis) walks it to do what Bring does.
func (v *Version) Prev() *Version { return v.prev }

// Lineage returns the lineage v belongs to.
func (v *Version) Lineage() *Lineage { return v.lineage }

// Bring converts s, last refilled under version from, to version v: each
// version in between refills up to the next one's activation and converts
// under that one's OnResize. from == nil or from == v (same ID) leaves s as
// it is. When from is not in v's remembered history (another lineage, or too
// old), s converts directly from from's parameters at v's activation.
func (v *Version) Bring(s State, from *Version) State {
	if from == nil || from.ID == v.ID {
		return s
	}
	if v.prev == nil || !v.prev.remembers(from.ID) {
		return Transition(s, from.Params, v.Params, v.ActiveAt, v.OnResize)
	}
	s = v.prev.Bring(s, from)
	return Transition(s, v.prev.Params, v.Params, v.ActiveAt, v.OnResize)
}

func (v *Version) remembers(id uint64) bool {
	for ; v != nil; v = v.prev {
		if v.ID == id {
			return true
		}
	}
	return false
}

// Horizon ends the life of a version's buckets: a bucket last refilled at
// the monotonic instant at carries no information from End(at) on (a
// calendar budget's period is over), so a store may drop it then. End is
// after at. Implementations are safe for concurrent use.
type Horizon interface {
	End(at int64) int64
}
