package rlqs

// The arithmetic of assignments, pure: how a rule's rate becomes Envoy's
// token bucket (fill), how one bucket's rate is shared among the streams
// subscribed to it (share), and what a lease costs (lease). Every number
// is an integer; products go through 128 bits.

import (
	"math"
	"math/bits"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/policy"
)

// fill is how a rule's rate is handed to Envoy, whose token bucket counts
// requests: requests per fill interval of whole seconds, because Envoy
// reads only the seconds of fill_interval. A request costs unit tokens of
// the rule's bucket, the rule's cost.
type fill struct {
	interval int64 // nanoseconds, a whole number of seconds, at least one
	tokens   int64 // the rule's whole requests per interval, 1 to math.MaxUint32
	unit     int64 // tokens a request costs, at least 1
}

// fillOfRule is the fill of a rule's bands: its leases are paid from
// every band, so Envoy's token bucket refills at the slowest band's rate.
// A calendar budget refills nothing within its period, so it counts only
// on a rule of budgets alone, at its pace: the budget over the longest
// its period can be (paceOf).
func fillOfRule(rule *policy.Rule) fill {
	var slowest, pace bucket.Rate
	for i := range rule.Bands {
		b := &rule.Bands[i]
		if b.Budget != nil {
			if r := paceOf(b); pace.IsZero() || slower(r, pace) {
				pace = r
			}
		} else if r := b.Version.Params.Rate(); slowest.IsZero() || slower(r, slowest) {
			slowest = r
		}
	}
	if slowest.IsZero() {
		slowest = pace
	}
	return fillOf(slowest, rule.Cost)
}

// longestPeriod is the longest a budget's period can be: a day, a week or
// a month of 31 days, each an hour longer across a DST change.
var longestPeriod = [...]time.Duration{policy.PerDay: 25 * time.Hour, policy.PerWeek: 7*24*time.Hour + time.Hour, policy.PerMonth: 31*24*time.Hour + time.Hour}

// paceOf is a budget band's pace: its budget (at most a rate's
// bucket.MaxRateTokens) over the longest its period can be, so that
// leases at that pace never ask more of a period than it holds however
// long it is. Both are in a rate's range, so NewRate cannot fail.
func paceOf(b *policy.Band) bucket.Rate {
	r, _ := bucket.NewRate(min(b.Version.Params.Capacity(), bucket.MaxRateTokens), longestPeriod[b.Budget.Per])
	return r
}

// slower reports whether rate a gives fewer tokens per instant than b:
// a.n/a.per < b.n/b.per, compared in 128 bits.
func slower(a, b bucket.Rate) bool {
	ah, al := bits.Mul64(uint64(a.Tokens()), uint64(b.Per()))
	bh, bl := bits.Mul64(uint64(b.Tokens()), uint64(a.Per()))
	return ah < bh || ah == bh && al < bl
}

// fillOf is the shortest whole-second interval in which the rate gives at
// least one request of unit tokens, and the rate's whole requests in it (at
// most math.MaxUint32, the most a token_bucket says).
func fillOf(r bucket.Rate, unit int64) fill {
	unit = max(unit, 1)
	hi, perU := bits.Mul64(uint64(r.Per()), uint64(unit))
	if hi != 0 || perU > math.MaxInt64/2 {
		// Less than a request in 146 years: one request a century.
		return fill{interval: int64(100 * 365 * 24 * time.Hour), tokens: 1, unit: unit}
	}
	n, per := uint64(r.Tokens()), perU
	sec := uint64(time.Second)
	// seconds = ceil(per / (n * 1s)): n*1s may pass 2^64, and then one
	// second is plenty.
	seconds := uint64(1)
	if hi, lo := bits.Mul64(n, sec); hi == 0 && lo < per {
		seconds = (per + lo - 1) / lo
	}
	hi, lo := bits.Mul64(n, seconds*sec)
	tokens := uint64(math.MaxUint32)
	if hi < per {
		if q, _ := bits.Div64(hi, lo, per); q < tokens {
			tokens = q
		}
	}
	return fill{interval: int64(seconds * sec), tokens: int64(tokens), unit: unit}
}

// share is stream i's target share of total tokens per fill among streams
// whose recent demands are weights: each gets a floor of total/(4n) (at
// least 1 while total >= n), so that a quiet stream can start, and the
// rest is divided in proportion to demand plus one. The targets sum to at
// most total.
func share(total int64, weights []int64, i int) int64 {
	n := int64(len(weights))
	floor := floorShare(total, n)
	rest := uint64(total - n*floor)
	var sum uint64
	for _, w := range weights {
		sum += uint64(w) + 1
	}
	hi, lo := bits.Mul64(rest, uint64(weights[i])+1)
	q, _ := bits.Div64(hi, lo, sum) // hi < sum: the weight is at most sum
	return floor + int64(q)
}

// floorShare is the share every one of n streams gets whatever its
// demand: total/(4n), at least 1 while there is a token for each.
func floorShare(total, n int64) int64 {
	if f := total / (4 * n); f > 0 || total < n {
		return f
	}
	return 1
}

// maxWeight bounds a stream's demand, so that the sum of a bucket's
// weights never overflows whatever Envoy reports.
const maxWeight = 1 << 40

// worthChanging says whether a stream holding k tokens per fill should be
// sent target instead: a new token bucket starts full in Envoy, a burst
// the next lease pays for again, so small moves (1/8 or less) wait.
func worthChanging(k, target int64) bool {
	d := target - k
	if d < 0 {
		d = -d
	}
	return k == 0 || d*8 > k
}

// lease is what one stream's token bucket for one bucket is paid for. The
// token bucket Envoy runs holds at most m tokens and gains k each fill
// interval, continuously; it starts full when Envoy receives it. So from
// start to any instant x Envoy can spend at most m + k*(x-start)/interval,
// and the lease has paid m plus paidRate refill tokens, which cover every
// instant up to covered().
type lease struct {
	k, m     int64 // tokens per fill and max tokens; k == 0: no token bucket
	start    int64 // when it was first sent
	paidRate int64 // refill tokens paid since start
	expires  int64 // when Envoy's assignment runs out: the last send + its TTL
}

// rateCost is the refill tokens still to pay so that the lease covers every
// instant up to until: ceil(k*(until-start)/interval) - paidRate, at least 0.
func (l *lease) rateCost(f fill, until int64) int64 {
	if l.k == 0 || until <= l.start {
		return 0
	}
	hi, lo := bits.Mul64(uint64(l.k), uint64(until-l.start))
	q, r := bits.Div64(hi, lo, uint64(f.interval)) // hi < 2^32 <= interval
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		q = math.MaxInt64
	}
	return max(int64(q)-l.paidRate, 0)
}

// unspent is the refill paid beyond at, which Envoy cannot spend if the
// token bucket is replaced by then: paidRate - ceil(k*(at-start)/interval),
// at least 0.
func (l *lease) unspent(f fill, at int64) int64 {
	if l.k == 0 {
		return 0
	}
	need := *l
	need.paidRate = 0
	return max(0, l.paidRate-need.rateCost(f, at))
}

// covered is the last instant the paid refill covers:
// start + floor(paidRate*interval/k).
func (l *lease) covered(f fill) int64 {
	if l.k == 0 {
		return l.start
	}
	hi, lo := bits.Mul64(uint64(l.paidRate), uint64(f.interval))
	if hi >= uint64(l.k) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(l.k))
	if q > uint64(math.MaxInt64-l.start) {
		return math.MaxInt64
	}
	return l.start + int64(q)
}

// affordable is the largest k whose new lease (m = k, and k*ahead/interval
// refill, rounded up) costs at most tokens, at most target.
func affordable(f fill, tokens, ahead, target int64) int64 {
	if tokens <= 1 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(tokens-1), uint64(f.interval))
	q, _ := bits.Div64(hi, lo, uint64(f.interval+ahead)) // hi < interval+ahead
	return min(int64(q), target)
}
