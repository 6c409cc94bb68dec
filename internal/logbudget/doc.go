// Package logbudget bounds how many lines a log writes while something
// happens on every request (a store outage, a flood of refusals) and counts
// the lines it drops, so that the next line that goes out can say how many
// it stands for.
//
// A Budget lets at most per lines through in each interval. An interval
// starts at the first line let through after the previous one ended, not
// on a grid: with one line per interval, two lines are always at least an
// interval apart. Instants are clock.Clock readings (monotonic
// nanoseconds) passed in by the caller, so the package never reads the
// time and tests step through fixed instants.
//
// A Budget is safe for concurrent use and takes no lock: a dropped line
// costs three atomic operations and no allocation (a new interval
// allocates its window), and Flush with nothing dropped one atomic load.
// Counts are exact; a line may count one dropped at the same instant by
// another goroutine that, strictly, came after it.
//
// Clip bounds a line's length as a Budget bounds their number: a value a
// client chose (a domain, a descriptor value, a header, a path) goes into a
// line as a short prefix and its length, so that a line costs the same
// whatever the client sent.
package logbudget
