package policy

// A post-paid rule's reservations: reserve N holds N tokens for a check's
// request id until the report with the same id settles them, or until
// reserve_ttl ends (docs/policy.md, "Reservations"; store.go's
// "Reservations" is the contract).

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultReserveTTL is how long a reservation lives unsettled when the
// rule does not say.
const DefaultReserveTTL = 10 * time.Minute

// MaxReserveTTL is the longest reserve_ttl: a reservation waits for one
// response, and the store holds it that long.
const MaxReserveTTL = 24 * time.Hour

// reserveTTLPattern is what the schema says a reserve_ttl looks like: a
// Go duration (time.ParseDuration), positive.
const reserveTTLPattern = `^\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h)(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))*$`

// Reserves reports whether the rule's checks hold tokens (reserve).
func (r *Rule) Reserves() bool { return r.Reserve > 0 }

// reserve reads a limited rule's reserve and reserve_ttl (limits): only on
// a rule charged after the response that is not shadow, 1 <= reserve <=
// capacity (the smallest of its limits': a check holds it on every one),
// and a positive reserve_ttl of at most MaxReserveTTL (default
// DefaultReserveTTL). paramsOK is whether the bands' params are valid.
func (r *reader) reserve(rule *Rule, f map[string]*yaml.Node, a at, paramsOK bool) {
	n, tn := f["reserve"], f["reserve_ttl"]
	if n == nil {
		if tn != nil {
			r.fail(tn, a, "reserve_ttl", errors.New("only with reserve"))
		}
		return
	}
	switch {
	case rule.Charge == BeforeRequest:
		r.fail(n, a, "reserve", errors.New("only with charge: after_response (a rule charged before the request charges its cost at once)"))
		return
	case rule.Charge == EveryHit:
		r.fail(n, a, "reserve", errors.New("only with charge: after_response (a rule charged every hit has no checks: each hit is charged at once)"))
		return
	case rule.Shadow:
		r.fail(n, a, "reserve", errors.New("not allowed with shadow: true (a shadow rule is decided without the request id, so nothing could settle its reservations)"))
		return
	}
	v, err := integer(n)
	switch {
	case err != nil:
	case v < 1:
		err = fmt.Errorf("%d is below 1", v)
	case paramsOK && v > rule.minCapacity():
		err = fmt.Errorf("%d exceeds capacity %d (a check could never hold it)", v, rule.minCapacity())
	}
	if err != nil {
		r.fail(n, a, "reserve", err)
		return
	}
	rule.Reserve, rule.ReserveTTL = v, DefaultReserveTTL
	if tn == nil {
		return
	}
	s, err := text(tn)
	var ttl time.Duration
	if err == nil {
		ttl, err = time.ParseDuration(s)
	}
	if err == nil && (ttl <= 0 || ttl > MaxReserveTTL) {
		err = fmt.Errorf("%s is out of range (0, %s]", ttl, MaxReserveTTL)
	}
	if err != nil {
		r.fail(tn, a, "reserve_ttl", err)
		return
	}
	rule.ReserveTTL = ttl
}

// reserveNeedsID refuses a reserve on rule node n of domain (its index-th
// rule) when the policy has no request_id_key: the report that settles a
// reservation is found by its request id. It is checked whatever else is
// wrong with the rule.
func (r *reader) reserveNeedsID(n *yaml.Node, domain string, index int, requestIDKey string) {
	v := lookup(n, "reserve")
	if v == nil || requestIDKey != "" {
		return
	}
	a := at{domain: domain, index: index}
	if name := lookup(n, "name"); name != nil {
		a.rule, _ = identifier(name)
	}
	r.fail(v, a, "reserve", errors.New("needs the policy's request_id_key (the report that settles a reservation is found by its request id)"))
}

// explainReserve says what a reserve rule's checks hold (explain).
func explainReserve(b *strings.Builder, r *Rule) {
	if !r.Reserves() {
		return
	}
	fmt.Fprintf(b, "  reserve %d, reserve_ttl %s: a check with the request id holds %d tokens (admitted only if they are there),\n"+
		"  and the report with the same id is charged its cost less %d (a refund when negative); unsettled,\n"+
		"  they come back after %s; a check without a request id holds nothing\n", r.Reserve, r.ReserveTTL, r.Reserve, r.Reserve, r.ReserveTTL)
}

// exportReserve is the rule's reserve and reserve_ttl as NativeYAML writes
// them: the ttl only when it is not the default.
func exportReserve(r *Rule) (int64, string) {
	if !r.Reserves() || r.ReserveTTL == DefaultReserveTTL {
		return r.Reserve, ""
	}
	return r.Reserve, r.ReserveTTL.String()
}
