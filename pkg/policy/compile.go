package policy

import (
	"sync/atomic"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// Compiler compiles policy files into Policies whose rules carry parameter
// versions (bucket.Version) that follow on from the previous policy's. It
// numbers versions from one counter, so the IDs of one Compiler are unique
// and increasing; a process keeps one Compiler for its whole life. The zero
// Compiler is ready to use and it is safe for concurrent use.
type Compiler struct {
	// Unsupported, when not nil, says what the store the policies are for
	// cannot decide: a limited rule it returns an error for is refused
	// with that error, at the rule's line, as an invalid field is. Set it
	// before the first Compile.
	Unsupported func(*Rule) error
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
	lastID          atomic.Uint64
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
//   - a rule of prev (same domain and name) whose capacity, refill rate,
//     debt bound and on_resize are unchanged keeps the same *bucket.Version;
//   - a changed rule gets prev's version.Next(id, params, now, on_resize);
//   - a new rule, or one that had no bucket, starts a new lineage;
//   - rules of prev that are gone (or lost their bucket) are removed when
//     the new policy is activated.
//
// now is the monotonic instant (the store's clock) from which new versions
// apply. A file that does not validate, or that has a rule Unsupported
// refuses, returns Errors, consumes no version IDs and changes nothing. Compile publishes nothing: call Activate when
// the returned policy starts serving.
func (c *Compiler) Compile(file string, data []byte, prev *Policy, now int64) (*Policy, error) {
	return c.CompileFiles(file, []File{{Name: file, Data: data}}, prev, now)
}

// CompileFiles is Compile for a set of files (a directory, name), each in
// either format (files.go).
func (c *Compiler) CompileFiles(name string, files []File, prev *Policy, now int64) (*Policy, error) {
	p, err := parseFiles(name, files, c.referenceCharge())
	if err == nil {
		err = c.supported(p)
	}
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
				r.Version = c.version(r, prev.limited(r.Domain, r.Name), now)
			}
		}
	}
	if prev != nil {
		for _, name := range prev.names {
			for _, old := range prev.domains[name].rules {
				if old.HasBucket() && p.limited(old.Domain, old.Name) == nil {
					p.removed = append(p.removed, old.Version.Lineage())
				}
			}
		}
	}
	return p, nil
}

// supported returns the Errors of p's limited rules that Unsupported
// refuses.
func (c *Compiler) supported(p *Policy) error {
	if c.Unsupported == nil {
		return nil
	}
	var errs Errors
	for _, name := range p.names {
		for _, r := range p.domains[name].rules {
			if !r.HasBucket() {
				continue
			}
			if err := c.Unsupported(r); err != nil {
				errs = append(errs, &Issue{File: r.File, Line: r.Line, Domain: r.Domain, Rule: r.Name, Err: err})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func (c *Compiler) version(r, old *Rule, now int64) *bucket.Version {
	switch {
	case old == nil:
		return bucket.NewVersion(c.lastID.Add(1), r.params, now)
	case old.Version.Params == r.params && old.OnResize == r.OnResize:
		return old.Version
	}
	return old.Version.Next(c.lastID.Add(1), r.params, now, r.OnResize)
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
			if r.Version != nil {
				r.Version.Lineage().Publish(r.Version)
			}
		}
	}
	for _, l := range p.removed {
		l.Remove()
	}
}
