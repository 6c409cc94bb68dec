package policy

import (
	"fmt"
	"strings"
	"time"
)

// Unit is a unit of time as Envoy's rate-limit response names it; its
// values are those of RateLimitResponse.RateLimit.Unit, so a conversion
// is a cast.
type Unit uint8

// The units; Month is 30 days and Year 365, as envoyproxy/ratelimit counts
// them.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var units = []struct {
	unit Unit
	name string
	d    time.Duration
}{
	{UnitSecond, "second", time.Second},
	{UnitMinute, "minute", time.Minute},
	{UnitHour, "hour", time.Hour},
	{UnitDay, "day", 24 * time.Hour},
	{UnitWeek, "week", 7 * 24 * time.Hour},
	{UnitMonth, "month", 30 * 24 * time.Hour},
	{UnitYear, "year", 365 * 24 * time.Hour},
}

// ParseUnit reads a unit name in any case (second, MINUTE, ...), as the
// reference does.
func ParseUnit(s string) (Unit, error) {
	for _, u := range units {
		if strings.EqualFold(s, u.name) {
			return u.unit, nil
		}
	}
	return UnitUnknown, fmt.Errorf("unit %q: want second, minute, hour, day, week, month or year", s)
}

// Duration is the unit's length; 0 for UnitUnknown.
func (u Unit) Duration() time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.d
		}
	}
	return 0
}

// String is the unit's lower-case name, "unknown" for UnitUnknown.
func (u Unit) String() string {
	for _, x := range units {
		if x.unit == u {
			return x.name
		}
	}
	return "unknown"
}
