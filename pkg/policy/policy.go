package policy

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
)

// Policy is one compiled policy file. It is immutable once compiled and safe
// for concurrent use; Activate is the only method with an effect, and it
// acts on the rules' version lineages, not on the Policy.
type Policy struct {
	name         string
	revision     int64
	sum          [32]byte
	requestIDKey string
	domains      map[string]*domain
	names        []string // domain names, sorted
	frontDoors   map[string]*spec.Door
	warnings     []*Issue
	removed      []*bucket.Lineage // rules of the previous policy that are gone
}

// Rule is one compiled rule. Its fields are read-only: a Rule belongs to an
// immutable Policy and is shared by every request that matches it.
type Rule struct {
	Domain string
	Name   string
	Match  []Pattern
	// File is the policy file the rule was read from; Line is where the
	// rule starts in it.
	File string
	Line int
	// Unlimited rules always answer OK and have no bucket: Version is nil
	// and the fields below are zero.
	Unlimited bool
	// NotLimited rules match and end the search: their descriptors are
	// answered as if no rule matched (OK, no current_limit, nothing
	// consumed). The reference format needs them where a descriptor stops
	// at a node without a limit. No bucket.
	NotLimited bool
	// Deny rules answer every descriptor OVER_LIMIT (capacity: 0, the
	// reference's requests_per_unit: 0). No bucket.
	Deny bool
	// Limit is what the rule's statuses say in current_limit.
	Limit Limit
	// Replaces are limit names (Limit.Name) this rule drops: a descriptor
	// of the same request whose rule has one of these names is answered
	// as if no rule matched (the reference's replaces).
	Replaces []string
	// Version is the rule's parameter version in this policy: capacity and
	// refill rate (Version.Params), activation instant and lineage. With
	// several limits it is the first band's (Bands[0].Version).
	Version *bucket.Version
	// Bands are the rule's limits (limits.go), at least one on a rule
	// with a bucket: the shorthand capacity and refill are one band. A
	// descriptor is charged on every band or on none.
	Bands []Band
	// Cost is what a request costs when Envoy sends no hits_addend; 0 for
	// a rule charged after the response.
	Cost int64
	// MaxCost is the largest cost a request may ask; more is refused. 0
	// for a post-paid rule (PostPaid): its reports are never refused.
	MaxCost int64
	// Charge is when the rule charges (charge.go): before the request,
	// after the response (post-paid), or every hit; the last two with
	// their debt bound in Version.Params.MaxDebt().
	Charge Charge
	// Reserve is how many tokens a post-paid rule's check holds for its
	// request id until its report settles them (reserve.go), for at most
	// ReserveTTL; 0: none.
	Reserve    int64
	ReserveTTL time.Duration
	// OnResize is how a live balance converts when capacity or rate change.
	OnResize bucket.ResizeMode
	// OnStoreError is what the rule answers while its store fails: the
	// rule's on_store_error, or when it names none its Compiler's default
	// (Compiler.OnStoreError, DefaultStoreErrorMode).
	OnStoreError StoreErrorMode
	// Shadow rules decide and count but always answer OK.
	Shadow bool
	// Quota rules (the reference's quota_mode) refuse a request only
	// together: one over the limit answers OVER_LIMIT for itself and is not
	// charged, and the request is refused when every quota descriptor of it
	// is over the limit. A shadow rule is never a quota rule.
	Quota bool

	prefix []byte // encoded domain and name: the start of every key
	// storeErrorNamed: the rule names its on_store_error; else the
	// Compiler's default is set when it compiles.
	storeErrorNamed bool
}

// StoreErrorMode is what a rule answers when its store fails.
type StoreErrorMode uint8

const (
	// StoreErrorDeny answers OVER_LIMIT.
	StoreErrorDeny StoreErrorMode = iota
	// StoreErrorAllow answers OK.
	StoreErrorAllow
	// StoreErrorLocal decides from a bounded local budget.
	StoreErrorLocal
)

// DefaultStoreErrorMode is the on_store_error of a rule that names none,
// unless its Compiler says otherwise: local, so that a stall or loss of the
// shared store answers from a bounded budget per replica (marked
// degraded) instead of refusing every request in flight as if each were
// over its limit.
const DefaultStoreErrorMode = StoreErrorLocal

// ParseStoreErrorMode reads "deny", "allow" or "local".
func ParseStoreErrorMode(s string) (StoreErrorMode, error) {
	switch s {
	case "deny":
		return StoreErrorDeny, nil
	case "allow":
		return StoreErrorAllow, nil
	case "local":
		return StoreErrorLocal, nil
	}
	return DefaultStoreErrorMode, fmt.Errorf("%q: want deny, allow or local", s)
}

func (m StoreErrorMode) String() string {
	switch m {
	case StoreErrorAllow:
		return "allow"
	case StoreErrorLocal:
		return "local"
	}
	return "deny"
}

// Name is the file name the policy was compiled from.
func (p *Policy) Name() string { return p.name }

// Revision is the file's revision field (0 when absent).
func (p *Policy) Revision() int64 { return p.revision }

// SHA256 is the hex SHA-256 of the file's bytes.
func (p *Policy) SHA256() string { return hex.EncodeToString(p.sum[:]) }

// RequestIDKey is the descriptor key that carries a request's id, "" when
// the policy names none.
func (p *Policy) RequestIDKey() string { return p.requestIDKey }

// Domains returns the domain names, sorted.
func (p *Policy) Domains() []string { return slices.Clone(p.names) }

// Rules returns a domain's rules in file order (nil for an unknown domain).
func (p *Policy) Rules(domain string) []*Rule {
	if d := p.domains[domain]; d != nil {
		return slices.Clone(d.rules)
	}
	return nil
}

// Rule returns the rule of a domain by name, nil when there is none.
func (p *Policy) Rule(domain, name string) *Rule {
	if d := p.domains[domain]; d != nil {
		return d.byName[name]
	}
	return nil
}

// Warnings are the problems that did not stop the file from compiling,
// such as rules that can never match.
func (p *Policy) Warnings() []*Issue { return slices.Clone(p.warnings) }

// Match returns the first rule of domain, in file order, that matches the
// descriptor entries, or nil when none does (or the domain is unknown). A
// rule matches when the descriptor has exactly its entries, in order, with
// equal keys and values its patterns accept. Match does not allocate.
func (p *Policy) Match(domain string, entries []Entry) *Rule {
	d := p.domains[domain]
	if d == nil {
		return nil
	}
	return d.match(entries)
}

// HasBucket reports whether the rule decides from a bucket: it is not
// unlimited, not_limited or deny. Exactly such rules have a Version.
func (r *Rule) HasBucket() bool { return !r.Unlimited && !r.NotLimited && !r.Deny }

// Limit is what a rule's current_limit says.
type Limit struct {
	// Name is the rule's limit name: current_limit.name, the reference's
	// rate_limit name (maybe ""), else the rule's name. Replaces refers
	// to it.
	Name string
	// Given: RequestsPerUnit and Unit were written in the file; otherwise
	// they are derived from the refill rate where the response is built.
	Given           bool
	RequestsPerUnit uint32
	Unit            Unit
}

// AppendKey appends the bucket key of the descriptor entries (which must be
// ones r matched) to dst and returns the extended slice. The key encodes
// the domain, the rule name and every value, each preceded by its length,
// so that distinct descriptors never share a key; at a Shared position it
// holds the pattern as written instead of the value. It allocates only
// when dst lacks room.
func (r *Rule) AppendKey(dst []byte, entries []Entry) []byte {
	dst = append(dst, r.prefix...)
	for i, e := range entries {
		if i < len(r.Match) && r.Match[i].Shared {
			m := &r.Match[i]
			dst = appendWritten(dst, m)
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(e.Value)))
		dst = append(dst, e.Value...)
	}
	return dst
}

// DescriptorMetric reports whether the rule's decisions are also counted
// by descriptor (a pattern has Metric).
func (r *Rule) DescriptorMetric() bool {
	for _, m := range r.Match {
		if m.Metric {
			return true
		}
	}
	return false
}

// MetricLabel is the descriptor label of a decision of the rule (which
// matched entries), as the reference names its detailed stats: key_value
// for each position whose value is counted (Metric, not Shared), else the
// pattern as written (key_value, key_prefix*, or the key alone for any
// value), joined by ".".
func (r *Rule) MetricLabel(entries []Entry) string {
	var b strings.Builder
	for i, m := range r.Match {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(m.Key)
		switch {
		case m.Metric && !m.Shared:
			b.WriteByte('_')
			b.WriteString(entries[i].Value)
		case m.Kind != MatchAny || m.Shared:
			b.WriteByte('_')
			b.WriteString(m.written())
		}
	}
	return b.String()
}

// appendWritten appends the pattern as written (Pattern.written), length
// first, without building the string.
func appendWritten(dst []byte, m *Pattern) []byte {
	switch m.Kind {
	case MatchAny:
		return append(dst, 1, '*')
	case MatchPrefix:
		dst = binary.AppendUvarint(dst, uint64(len(m.Value)+1))
		return append(append(dst, m.Value...), '*')
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Value)))
	return append(dst, m.Value...)
}

// KeyString is a human-readable form of the bucket key, for logs and
// `tokengate explain`: edge/search["alice" "/search"].
func (r *Rule) KeyString(entries []Entry) string {
	values := make([]string, len(entries))
	for i, e := range entries {
		if i < len(r.Match) && r.Match[i].Shared {
			values[i] = r.Match[i].written() + " (shared)"
			continue
		}
		values[i] = strconv.Quote(e.Value)
	}
	return r.Domain + "/" + r.Name + "[" + strings.Join(values, " ") + "]"
}

func keyPrefix(domain, name string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(domain)))
	b = append(b, domain...)
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}
