package policy

import (
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
)

// Compiler compiles policy files into Policies whose rules carry parameter
// versions (bucket.Version) that follow on from the previous policy's. It
// numbers versions from one counter, so the IDs of one Compiler are unique
// and increasing; a process keeps one Compiler for its whole life. The zero
// Compiler is ready to use and it is safe for concurrent use.
type Compiler struct {
	// OnStoreError, when set, is the on_store_error of the rules that name
	// none, in either format (serve's --on-store-error); nil is
	// DefaultStoreErrorMode. Set it before the first Compile.
	OnStoreError *StoreErrorMode
	// ReferenceCharge, when set, is how the rules of envoyproxy/ratelimit's
	// files (and xDS) charge: StopWhenOver as the reference counts with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (only the descriptors
	// that go over are counted), BeforeRequest so that a refused request
	// charges nothing at all. Nil is every hit (charge: every_hit), as the
	// reference counts by default; either way max_debt is one window's
	// requests_per_unit. Set it before the first Compile.
	ReferenceCharge *Charge
	// Anchor maps the store's clock onto the wall clock, for calendar
	// budgets (budget.go): taken once when the process starts (its
	// clock's clock.Monotonic.Anchor). Set it before the first Compile.
	Anchor clock.Anchor
	lastID atomic.Uint64
}

// referenceCharge is how the rules of reference files are charged.
func (c *Compiler) referenceCharge() Charge {
	if c.ReferenceCharge != nil {
		return *c.ReferenceCharge
	}
	return EveryHit
}

// Compile parses and validates the policy file data (file names it in
// messages) and versions its rules against prev, the policy now serving
// (nil for the first):
//
//   - each band of a rule (limits.go) versions apart, matched by position
//     with the same rule of prev (same domain and name): a band whose
//     capacity, refill rate, debt bound and the rule's on_resize are
//     unchanged keeps the same *bucket.Version;
//   - a changed band gets prev's band version.Next(id, params, now,
//     on_resize): its balances convert under the rule's on_resize;
//   - a new band (a new rule, one that had no bucket, a position prev's
//     rule had no band at, or a band whose kind, budget period or time
//     zone changed) starts a new lineage: its buckets start full;
//   - bands of prev that are gone (their rule, its bucket or the position)
//     are removed when the new policy is activated.
//
// now is the monotonic instant (the store's clock) from which new versions
// apply. A file that does not validate returns Errors, consumes no version IDs and changes nothing. Compile publishes nothing: call Activate when
// the returned policy starts serving.
func (c *Compiler) Compile(file string, data []byte, prev *Policy, now int64) (*Policy, error) {
	return c.CompileFiles(file, []File{{Name: file, Data: data}}, prev, now)
}

// CompileFiles is Compile for a set of files (a directory, name), each in
// either format (files.go).
func (c *Compiler) CompileFiles(name string, files []File, prev *Policy, now int64) (*Policy, error) {
	p, err := parseFiles(name, files, c.referenceCharge())
	if err != nil {
		return nil, err
	}
	onStoreError := DefaultStoreErrorMode
	if c.OnStoreError != nil {
		onStoreError = *c.OnStoreError
	}
	for _, name := range p.names {
		for _, r := range p.domains[name].rules {
			if !r.storeErrorNamed {
				r.OnStoreError = onStoreError
			}
			if r.HasBucket() {
				c.versions(r, prev.limited(r.Domain, r.Name), now)
			}
		}
	}
	if prev != nil {
		for _, name := range prev.names {
			for _, old := range prev.domains[name].rules {
				if !old.HasBucket() {
					continue
				}
				r := p.limited(old.Domain, old.Name)
				for i, b := range old.Bands {
					if r == nil || i >= len(r.Bands) || r.Bands[i].Version.Lineage() != b.Version.Lineage() {
						p.removed = append(p.removed, b.Version.Lineage())
					}
				}
			}
		}
	}
	return p, nil
}

// versions sets the version of each band of r, which follows on from the
// band at the same position of old (nil: none), and r.Version.
func (c *Compiler) versions(r, old *Rule, now int64) {
	for i := range r.Bands {
		b := &r.Bands[i]
		if b.Budget != nil {
			b.Budget.anchor = c.Anchor
		}
		switch {
		case old == nil || i >= len(old.Bands) || !sameSchedule(&old.Bands[i], b):
			b.Version = bucket.NewVersion(c.lastID.Add(1), b.params, now)
		case old.Bands[i].Version.Params == b.params && old.OnResize == r.OnResize:
			b.Version = old.Bands[i].Version
			continue
		default:
			b.Version = old.Bands[i].Version.Next(c.lastID.Add(1), b.params, now, r.OnResize)
		}
		if b.Budget != nil {
			b.Version.Horizon = b.Budget
		}
	}
	r.Version = r.Bands[0].Version
}

// limited returns the limited rule of a domain by name; nil when p is nil
// or has no such rule.
func (p *Policy) limited(domain, name string) *Rule {
	if p == nil {
		return nil
	}
	if r := p.Rule(domain, name); r != nil && r.HasBucket() {
		return r
	}
	return nil
}

// ParseFiles is Parse for a set of files (a directory, name).
func ParseFiles(name string, files []File) (*Policy, error) {
	return new(Compiler).CompileFiles(name, files, nil, 0)
}

// Parse compiles a policy file on its own, for checking and explaining it:
// its versions are numbered by a fresh Compiler. A service that reloads
// policies uses one Compiler and Compile instead.
func Parse(file string, data []byte) (*Policy, error) {
	return new(Compiler).Compile(file, data, nil, 0)
}

// Activate makes p's rule versions current: it publishes each limited
// rule's version on its lineage and marks the rules that left the policy
// as removed. Call it once, when p starts serving, and activate policies in
// the order they were compiled.
func (p *Policy) Activate() {
	for _, d := range p.domains {
		for _, r := range d.rules {
			for _, b := range r.Bands {
				b.Version.Lineage().Publish(b.Version)
			}
		}
	}
	for _, l := range p.removed {
		l.Remove()
	}
}
