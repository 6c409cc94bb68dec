package policy

// Calendar budgets: a band of `budget: N` tokens that is whole again at the
// start of each day, week (Monday) or month in a time zone, and never
// refills within one. A period is a bucket of its own: the period's start
// is part of the band's key, its bucket never refills
// (bucket.NewBudget), and its version's Horizon tells a store when the
// period ends, so a past period's bucket is dropped. Periods are found
// from the store's monotonic clock through the Compiler's Anchor (the wall
// clock read once at start), so a step of the wall clock moves no
// boundary; they are whole calendar days in the zone (time.Date), so a day
// of 23 or 25 hours across a DST change is exactly that long.

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // time zones without the host's database

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
)

// Per is a budget's period.
type Per uint8

// The periods; a week starts on Monday (ISO 8601).
const (
	PerDay Per = iota + 1
	PerWeek
	PerMonth
)

var perNames = map[string]Per{"day": PerDay, "week": PerWeek, "month": PerMonth}

// ParsePer reads "day", "week" or "month".
func ParsePer(s string) (Per, error) {
	if p, ok := perNames[s]; ok {
		return p, nil
	}
	return 0, fmt.Errorf("%q: want day, week or month", s)
}

func (p Per) String() string {
	for name, q := range perNames {
		if q == p {
			return name
		}
	}
	return ""
}

// Unit is the period as current_limit's unit.
func (p Per) Unit() Unit {
	return [...]Unit{PerDay: UnitDay, PerWeek: UnitWeek, PerMonth: UnitMonth}[p]
}

// Budget is a calendar band's schedule. It is immutable and safe for
// concurrent use.
type Budget struct {
	Per      Per
	Location *time.Location
	anchor   clock.Anchor // the Compiler's
}

// Bounds is the period that holds the monotonic instant now: its start
// and its end, as readings of the clock the anchor maps.
func (b *Budget) Bounds(now int64) (start, end int64) {
	t := time.Unix(0, b.anchor.Wall(now)).In(b.Location)
	y, m, d := t.Date()
	switch b.Per {
	case PerWeek:
		d -= (int(t.Weekday()) + 6) % 7
	case PerMonth:
		d = 1
	}
	for {
		s, e := b.reading(y, m, d), b.reading(b.next(y, m, d))
		// Where midnight does not exist (a DST change at 00:00), time.Date
		// picks an instant either side of the gap: step to the period
		// that holds now.
		switch {
		case now < s:
			y, m, d = b.prev(y, m, d)
		case now >= e:
			y, m, d = b.next(y, m, d)
		default:
			return s, e
		}
	}
}

// End is the end of the period that holds at: bucket.Horizon.
func (b *Budget) End(at int64) int64 {
	_, end := b.Bounds(at)
	return end
}

// StartUnix is the wall time of a period start (a Bounds start), in Unix
// seconds: what the band's key holds.
func (b *Budget) StartUnix(start int64) int64 { return b.anchor.Wall(start) / int64(time.Second) }

func (b *Budget) reading(y int, m time.Month, d int) int64 {
	return b.anchor.Reading(time.Date(y, m, d, 0, 0, 0, 0, b.Location).UnixNano())
}

func (b *Budget) next(y int, m time.Month, d int) (int, time.Month, int) {
	return b.step(y, m, d, 1)
}

func (b *Budget) prev(y int, m time.Month, d int) (int, time.Month, int) {
	return b.step(y, m, d, -1)
}

// step is the start of the period n periods after the one starting on
// y-m-d, normalized.
func (b *Budget) step(y int, m time.Month, d, n int) (int, time.Month, int) {
	switch b.Per {
	case PerWeek:
		d += 7 * n
	case PerMonth:
		m += time.Month(n)
	default:
		d += n
	}
	return time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
}

// sameSchedule reports whether two bands have the same kind and, for
// budgets, period and time zone: only then does one follow on from the
// other (their buckets have the same keys).
func sameSchedule(a, b *Band) bool {
	switch {
	case (a.Budget == nil) != (b.Budget == nil):
		return false
	case a.Budget == nil:
		return true
	}
	return a.Budget.Per == b.Budget.Per && a.Budget.Location.String() == b.Budget.Location.String()
}

// budget reads a band of budget, per and time_zone (band); prefix names
// the limits entry in messages.
func (r *reader) budget(n *yaml.Node, f map[string]*yaml.Node, a at, prefix string) (bucket.Params, *Budget, bool) {
	for _, field := range []string{"capacity", "refill"} {
		if v := f[field]; v != nil {
			r.fail(v, a, prefix+field, errors.New("not with budget (a budget is whole again at each period's start and never refills within one)"))
		}
	}
	ok := true
	var p bucket.Params
	if x, err := integer(f["budget"]); err != nil {
		r.fail(f["budget"], a, prefix+"budget", err)
		ok = false
	} else if p, err = bucket.NewBudget(x); err != nil {
		r.fail(f["budget"], a, prefix+"budget", err)
		ok = false
	}
	b := &Budget{Location: time.UTC}
	if v := f["per"]; v == nil {
		r.fail(n, a, prefix+"per", errors.New("missing: day, week or month"))
		ok = false
	} else if !enumField(r, f, a, "per", ParsePer, &b.Per) {
		r.errs[len(r.errs)-1].Field = prefix + "per"
		ok = false
	}
	if v := f["time_zone"]; v != nil {
		s, err := text(v)
		if err == nil {
			b.Location, err = time.LoadLocation(s)
		}
		if err == nil && s == "Local" {
			err = errors.New(`"Local" is the host's zone: name an IANA zone, such as Europe/Madrid`)
		}
		if err != nil {
			r.fail(v, a, prefix+"time_zone", err)
			ok = false
		}
	}
	return p, b, ok
}

// HasBudget reports whether one of the rule's bands is a calendar budget.
func (r *Rule) HasBudget() bool {
	for _, b := range r.Bands {
		if b.Budget != nil {
			return true
		}
	}
	return false
}
