package policy

// Writing a policy back in tokengate's own format: what `tokengate import`
// prints for a set of envoyproxy/ratelimit files. Every compiled rule,
// the not_limited stops included, is written in order with the fields
// that give the same decisions (TestImportRoundTrip checks it), so that
// loading the output and loading the input decide alike.

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

type nativeDoc struct {
	Revision     int64                   `yaml:"revision,omitempty"`
	RequestIDKey string                  `yaml:"request_id_key,omitempty"`
	Domains      map[string][]nativeRule `yaml:"domains"`
}

type nativeRule struct {
	Name         string        `yaml:"name"`
	Match        []nativeEntry `yaml:"match,flow"`
	Unlimited    bool          `yaml:"unlimited,omitempty"`
	NotLimited   bool          `yaml:"not_limited,omitempty"`
	Capacity     *int64        `yaml:"capacity,omitempty"`
	Refill       string        `yaml:"refill,omitempty"`
	Cost         *int64        `yaml:"cost,omitempty"`
	MaxCost      *int64        `yaml:"max_cost,omitempty"`
	Charge       string        `yaml:"charge,omitempty"`
	MaxDebt      *int64        `yaml:"max_debt,omitempty"`
	Reserve      int64         `yaml:"reserve,omitempty"`
	ReserveTTL   string        `yaml:"reserve_ttl,omitempty"`
	OnResize     string        `yaml:"on_resize,omitempty"`
	OnStoreError string        `yaml:"on_store_error,omitempty"`
	Shadow       bool          `yaml:"shadow,omitempty"`
	Quota        bool          `yaml:"quota,omitempty"`
	CurrentLimit *nativeLimit  `yaml:"current_limit,omitempty"`
	Replaces     []string      `yaml:"replaces,omitempty,flow"`
	Limits       []nativeBand  `yaml:"limits,omitempty"`
}

type nativeEntry struct {
	Key     string `yaml:"key"`
	Value   string `yaml:"value,omitempty"`
	Literal bool   `yaml:"literal,omitempty"`
	Shared  bool   `yaml:"shared,omitempty"`
	Metric  bool   `yaml:"metric,omitempty"`
}

type nativeLimit struct {
	RequestsPerUnit *uint32 `yaml:"requests_per_unit,omitempty"`
	Unit            string  `yaml:"unit,omitempty"`
	Name            *string `yaml:"name,omitempty"`
}

// unitPeriods are refill periods, as bucket.ParseRate reads them, that
// say a unit as the reference counts it.
var unitPeriods = map[Unit]string{UnitSecond: "s", UnitMinute: "m", UnitHour: "h", UnitDay: "d", UnitWeek: "7d", UnitMonth: "30d", UnitYear: "365d"}

// NativeYAML writes p in tokengate's own format. Front doors are not
// written (a reference file has none).
func (p *Policy) NativeYAML() ([]byte, error) {
	doc := nativeDoc{Revision: p.revision, RequestIDKey: p.requestIDKey, Domains: make(map[string][]nativeRule, len(p.names))}
	for _, name := range p.names {
		rules := make([]nativeRule, 0, len(p.domains[name].rules))
		for _, r := range p.domains[name].rules {
			rules = append(rules, nativeOf(r))
		}
		doc.Domains[name] = rules
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

func nativeOf(r *Rule) nativeRule {
	nr := nativeRule{Name: r.Name, Unlimited: r.Unlimited, NotLimited: r.NotLimited, Shadow: r.Shadow, Quota: r.Quota, Replaces: r.Replaces}
	for _, m := range r.Match {
		e := nativeEntry{Key: m.Key, Shared: m.Shared, Metric: m.Metric, Literal: m.Kind == MatchExact && strings.Contains(m.Value, "*")}
		if m.Kind != MatchAny || m.Shared {
			e.Value = m.written()
		}
		nr.Match = append(nr.Match, e)
	}
	if r.Unlimited || r.NotLimited {
		return nr
	}
	l := &nativeLimit{}
	if r.Limit.Given {
		rpu := r.Limit.RequestsPerUnit
		l.RequestsPerUnit, l.Unit = &rpu, r.Limit.Unit.String()
	}
	if r.Limit.Name != r.Name {
		name := r.Limit.Name
		l.Name = &name
	}
	if *l != (nativeLimit{}) {
		nr.CurrentLimit = l
	}
	if r.Deny {
		zero := int64(0)
		nr.Capacity = &zero
		return nr
	}
	nativeBands(&nr, r)
	if r.PostPaid() {
		nr.Charge = r.Charge.String()
		if debt, given := r.maxDebtGiven(); given {
			nr.MaxDebt = &debt
		}
		nr.Reserve, nr.ReserveTTL = exportReserve(r)
	}
	if r.Charge != AfterResponse && r.Cost != 1 {
		nr.Cost = &r.Cost
	}
	if !r.PostPaid() && r.MaxCost != r.minCapacity() {
		nr.MaxCost = &r.MaxCost
	}
	if r.OnResize != 0 {
		nr.OnResize = r.OnResize.String()
	}
	// Always written: a rule that names none would take the default of
	// the tokengate that reads it (--on-store-error), not the one it was
	// compiled with.
	nr.OnStoreError = r.OnStoreError.String()
	return nr
}

// storeErrorFinding is ImportReport's line on what p's limits answer
// while Redis fails or stalls: each rule's on_store_error (written on every
// rule), by mode and number of rules.
func (p *Policy) storeErrorFinding() string {
	var n [StoreErrorLocal + 1]int
	for _, name := range p.names {
		for _, r := range p.domains[name].rules {
			if r.HasBucket() {
				n[r.OnStoreError]++
			}
		}
	}
	var modes []string
	for _, m := range []StoreErrorMode{StoreErrorLocal, StoreErrorDeny, StoreErrorAllow} {
		if n[m] > 0 {
			modes = append(modes, m.String()+" on "+plural(n[m], "rule"))
		}
	}
	if len(modes) == 0 {
		modes = []string{"no limited rule"}
	}
	return "while Redis fails or answers slower than --redis-timeout (15ms by default), a decision does not wait for it: the rule's on_store_error answers, marked degraded (written on every rule: " + strings.Join(modes, ", ") +
		"): local from a bounded budget in each replica (--redis-local-share of the limit), deny OVER_LIMIT, allow OK; the reference waits for Redis, however slow, and returns an error when it fails, which Envoy's failure_mode_deny turns into letting the request through (false, its default) or refusing it"
}

// ImportReport lists every way p, compiled from envoyproxy/ratelimit
// files, answers differently from the reference, one finding a line:
// the differences of the format as a whole, then those of its rules and
// the file's warnings (fields tokengate reads but does not act on).
func (p *Policy) ImportReport() []string {
	out := []string{
		"every limit is a token bucket, not a fixed window: capacity requests_per_unit, refilled continuously at requests_per_unit per unit; a fresh burst gets the same answers, but there is no second burst at a window edge and spent requests come back gradually",
		"limit_remaining is the bucket's whole tokens; duration_until_reset is the time until the bucket is full (OK) or until the request fits (OVER_LIMIT, also as retry-after), not the time to the window's end",
	}
	if p.chargesEveryHit() {
		out = append(out,
			"charge: every_hit: as there, every hit is counted, over the limit or not, each descriptor whatever the others say, and a descriptor is OVER_LIMIT while its count is above the limit (hits_addend 0: a check); but the count goes at most one window's requests_per_unit over the limit and comes back at requests_per_unit per unit, so a client that keeps sending while over stays refused until it pauses, where the reference lets it through at the next window's start",
			"to charge nothing of a refused request (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true), delete the charge: every_hit lines")
	} else {
		out = append(out,
			"a request's descriptors are decided together: when one is over the limit none is charged, and an over-limit hit is never counted (the reference, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, still counts the hits of the descriptor that goes over, so a hits_addend 0 check after them is OVER_LIMIT there)",
			"a hits_addend above a limit's requests_per_unit is refused at once, with a reason in the dynamic metadata (OVER_LIMIT in both)",
			"quota_mode: as there, a request passes while one of its quota descriptors is within its limit, but the quota descriptors over it are not charged (such a request is decided twice, the second time without them)")
	}
	out = append(out,
		"keys and values are compared apart: the reference joins them as key_value, so its descriptor key \"a_b\" value \"c\" also matches a config key \"a\" value \"b_c\"",
		"a limit override Envoy sends in a descriptor (limit:) is ignored: the configured rule decides",
		"descriptors the walk stops at without a limit are not_limited rules, written out here; statistics are tokengate's Prometheus metrics by domain and rule, not the reference's stats keys",
		p.storeErrorFinding(),
	)
	for _, name := range p.names {
		for _, r := range p.domains[name].rules {
			if r.Deny {
				out = append(out, fmt.Sprintf("%s:%d: domain %q rule %q: requests_per_unit 0: OVER_LIMIT with a reason and no duration_until_reset (the reference gives the window's end)",
					r.File, r.Line, r.Domain, r.Name))
			}
		}
	}
	for _, w := range p.warnings {
		out = append(out, w.Error())
	}
	return out
}

// chargesEveryHit reports whether a rule of p charges every hit.
func (p *Policy) chargesEveryHit() bool {
	for _, name := range p.names {
		for _, r := range p.domains[name].rules {
			if r.Charge == EveryHit {
				return true
			}
		}
	}
	return false
}
