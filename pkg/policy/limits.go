package policy

// Several limits on one rule (limits:): each band is a bucket of its own
// for every descriptor the rule matches, and a descriptor's bands are
// decided together, all or nothing, in the request's one store call. The
// rule's capacity and refill are the one-band shorthand; a rule has one
// form or the other.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// MaxBands is the most limits one rule may have.
const MaxBands = 4

// bandFields are the fields of one entry of limits.
var bandFields = []string{"capacity", "refill", "budget", "per", "time_zone"}

// Band is one limit of a rule: a bucket per descriptor the rule matches.
// Its fields are read-only, like the Rule's.
type Band struct {
	// Version is the band's parameter version in this policy; the bands
	// of a rule version apart (Compiler.Compile).
	Version *bucket.Version
	// Budget is a calendar budget's schedule (budget.go); nil for a
	// bucket that refills.
	Budget *Budget
	params bucket.Params // what Version.Params will be, before versioning
}

// bands reads the rule's limits, or its one-band shorthand, into
// rule.Bands. ok: every band's parameters are valid; deny: the shorthand
// has capacity 0 (the rule denies everything, with no band).
func (r *reader) bands(rule *Rule, n *yaml.Node, f map[string]*yaml.Node, a at) (ok, deny bool) {
	ln := f["limits"]
	if ln == nil {
		p, capacity, capOK, ok := r.band(n, f, a, "", "missing (or set unlimited: true)")
		if capOK && capacity == 0 {
			return false, true
		}
		rule.Bands = []Band{{params: p}}
		return ok, false
	}
	for _, field := range bandFields {
		if v := f[field]; v != nil {
			r.fail(v, a, field, errors.New("not allowed with limits (give each limit its own entry there, or write the one limit without limits)"))
		}
	}
	if ln.Kind != yaml.SequenceNode || len(ln.Content) == 0 || len(ln.Content) > MaxBands {
		r.fail(ln, a, "limits", fmt.Errorf("want a list of 1 to %d limits, each {capacity, refill} or {budget, per, time_zone}, got %s", MaxBands, describe(ln)))
		return false, false
	}
	ok = true
	for i, bn := range ln.Content {
		field := fmt.Sprintf("limits[%d]", i+1)
		bf := r.fields(bn, a, field, bandFields)
		if bf == nil {
			ok = false
			continue
		}
		if bf["budget"] != nil {
			p, b, bandOK := r.budget(bn, bf, a, field+".")
			ok = ok && bandOK
			rule.Bands = append(rule.Bands, Band{params: p, Budget: b})
			continue
		}
		for _, only := range []string{"per", "time_zone"} {
			if v := bf[only]; v != nil {
				r.fail(v, a, field+"."+only, errors.New("only with budget"))
				ok = false
			}
		}
		p, capacity, capOK, bandOK := r.band(bn, bf, a, field+".", "missing")
		if capOK && capacity == 0 {
			r.fail(bf["capacity"], a, field+".capacity", errors.New("0: a limit allows at least one token (a rule that denies everything is capacity: 0 without limits)"))
		}
		ok = ok && bandOK
		rule.Bands = append(rule.Bands, Band{params: p})
	}
	return ok, false
}

// band reads one band's capacity and refill from f (the rule's fields for
// the shorthand, a limits entry's otherwise; prefix names the entry in
// messages, missing says what an absent field lacks). capOK: the capacity
// is a number; ok: the parameters are valid (never for capacity 0).
func (r *reader) band(n *yaml.Node, f map[string]*yaml.Node, a at, prefix, missing string) (p bucket.Params, capacity int64, capOK, ok bool) {
	if v := f["capacity"]; v == nil {
		r.fail(n, a, prefix+"capacity", errors.New(missing))
	} else if x, err := integer(v); err != nil {
		r.fail(v, a, prefix+"capacity", err)
	} else {
		capacity, capOK = x, true
	}
	if capOK && capacity == 0 {
		return p, 0, true, false
	}
	var rate bucket.Rate
	rateOK := false
	if v := f["refill"]; v == nil {
		r.fail(n, a, prefix+"refill", errors.New(missing))
	} else if s, err := text(v); err != nil {
		r.fail(v, a, prefix+"refill", err)
	} else if rate, err = bucket.ParseRate(s); err != nil {
		r.fail(v, a, prefix+"refill", err)
	} else {
		rateOK = true
	}
	if !capOK {
		return p, 0, false, false
	}
	// Check the capacity even when the rate is bad, against any valid
	// rate, so that both are reported.
	probe := rate
	if !rateOK {
		probe, _ = bucket.NewRate(1, time.Second)
	}
	p, err := bucket.NewParams(capacity, probe)
	if err != nil {
		r.fail(f["capacity"], a, prefix+"capacity", err)
	}
	return p, capacity, true, err == nil && rateOK
}

// minCapacity is the smallest capacity of the rule's bands: what a cost
// may be at most; 0 without a band (limits that did not parse).
func (rule *Rule) minCapacity() int64 {
	if len(rule.Bands) == 0 {
		return 0
	}
	c := rule.Bands[0].params.Capacity()
	for _, b := range rule.Bands[1:] {
		c = min(c, b.params.Capacity())
	}
	return c
}

// AppendBandKey appends the bucket key of band i of the descriptor entries
// (which must be ones r matched) at the monotonic instant now to dst: the
// rule's key (AppendKey) for a first band that refills, so that a rule's
// shorthand and its first band share their buckets; for every other band
// the rule's key followed by "#" and the band's number, and for a budget
// its period and the wall time its current period started (Unix seconds),
// so that each period is a bucket of its own. A rule's keys all have one
// number of entries, each length-prefixed, so a suffix never makes one
// descriptor's key another's.
func (r *Rule) AppendBandKey(dst []byte, entries []Entry, i int, now int64) []byte {
	dst = r.AppendKey(dst, entries)
	b := &r.Bands[i]
	if i == 0 && b.Budget == nil {
		return dst
	}
	dst = binary.AppendUvarint(append(dst, '#'), uint64(i))
	if b.Budget != nil {
		start, _ := b.Budget.Bounds(now)
		dst = binary.AppendVarint(append(dst, byte(b.Budget.Per)), b.Budget.StartUnix(start))
	}
	return dst
}

// nativeBand is one entry of limits as NativeYAML writes it.
type nativeBand struct {
	Capacity int64  `yaml:"capacity,omitempty"`
	Refill   string `yaml:"refill,omitempty"`
	Budget   int64  `yaml:"budget,omitempty"`
	Per      string `yaml:"per,omitempty"`
	TimeZone string `yaml:"time_zone,omitempty"`
}

func nativeBandOf(b *Band) nativeBand {
	if b.Budget != nil {
		return nativeBand{Budget: b.params.Capacity(), Per: b.Budget.Per.String(), TimeZone: b.Budget.Location.String()}
	}
	return nativeBand{Capacity: b.params.Capacity(), Refill: b.params.Rate().String()}
}

// nativeBands writes r's bands into nr: the shorthand for one band (its
// refill in the reference's unit when current_limit gave one), limits for
// several.
func nativeBands(nr *nativeRule, r *Rule) {
	if len(r.Bands) > 1 || r.Bands[0].Budget != nil {
		for i := range r.Bands {
			nr.Limits = append(nr.Limits, nativeBandOf(&r.Bands[i]))
		}
		return
	}
	pr := r.Bands[0].params
	capacity := pr.Capacity()
	nr.Capacity = &capacity
	nr.Refill = pr.Rate().String()
	if per, ok := unitPeriods[r.Limit.Unit]; ok && r.Limit.Given {
		nr.Refill = strconv.FormatUint(uint64(r.Limit.RequestsPerUnit), 10) + "/" + per
	}
}

// maxDebtGiven is the rule's max_debt and whether the file must say it:
// unless every band's bound is its own capacity (the default), all
// bands have one bound, which is what max_debt gave.
func (rule *Rule) maxDebtGiven() (int64, bool) {
	debt := rule.Bands[0].params.MaxDebt()
	for _, b := range rule.Bands {
		if b.params.MaxDebt() != b.params.Capacity() {
			return debt, true
		}
	}
	return debt, false
}

// bandsString describes the rule's bands for explain: "capacity 10,
// refill 1/s" for one, "limits [capacity 10, refill 1/s; ...]" for
// several.
func (rule *Rule) bandsString() string {
	parts := make([]string, len(rule.Bands))
	for i := range rule.Bands {
		parts[i] = rule.Bands[i].String()
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "limits [" + strings.Join(parts, "; ") + "]"
}

// String describes the band: "capacity 10, refill 1/s", or "budget 1000
// per month in Europe/Madrid".
func (b *Band) String() string {
	pr := b.Version.Params
	if b.Budget != nil {
		return fmt.Sprintf("budget %d per %s in %s", pr.Capacity(), b.Budget.Per, b.Budget.Location)
	}
	return fmt.Sprintf("capacity %d, refill %s", pr.Capacity(), pr.Rate())
}

// Plain reports whether the rule's limit is the one-band shorthand: one
// band that refills, all of it said by Version.Params.
func (rule *Rule) Plain() bool { return len(rule.Bands) == 1 && rule.Bands[0].Budget == nil }

// maxDebtString is the rule's debt bound for explain: one number, or each
// band's.
func (rule *Rule) maxDebtString() string {
	parts := make([]string, len(rule.Bands))
	for i, b := range rule.Bands {
		parts[i] = strconv.FormatInt(b.Version.Params.MaxDebt(), 10)
	}
	return strings.Join(parts, "; ")
}

// limitsSchema is the JSON Schema entry of a rule's limits (schema.go).
var limitsSchema = fieldSchema{typ: []string{"array"},
	desc: fmt.Sprintf("Several limits (1 to %d), decided together: a descriptor is charged on every one or on none, and the one that refuses decides current_limit and retry-after. Instead of capacity and refill, which are the one-limit form.", MaxBands),
	sub: func() (map[string]any, error) {
		band, err := objectSchema("One limit: a bucket of its own, refilling (capacity, refill) or a calendar budget (budget, per, time_zone).", bandFields, bandSchema, nil, nil)
		return map[string]any{"items": band, "minItems": 1, "maxItems": MaxBands}, err
	}}

var bandSchema = map[string]fieldSchema{
	"capacity":  {typ: []string{"integer"}, desc: "The burst, in tokens (1 or more)."},
	"budget":    {typ: []string{"integer"}, desc: "A calendar budget instead of capacity and refill: this many tokens, whole again at each period's start, never refilled within one."},
	"per":       {typ: []string{"string"}, enum: []string{"day", "week", "month"}, desc: "With budget: the period (a week starts on Monday)."},
	"time_zone": {typ: []string{"string"}, desc: "With budget: the IANA time zone the periods start in, such as Europe/Madrid (default UTC)."},
	"refill":    {typ: []string{"string"}, pattern: RatePattern, desc: refillDesc},
}

// LargestCapacity is the largest capacity of the rule's bands: a refund
// fills every band's bucket with that much.
func (rule *Rule) LargestCapacity() int64 {
	c := rule.Bands[0].Version.Params.Capacity()
	for _, b := range rule.Bands[1:] {
		c = max(c, b.Version.Params.Capacity())
	}
	return c
}
