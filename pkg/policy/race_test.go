//go:build race

package policy

// raceEnabled: the race detector is on, and code runs several times slower.
const raceEnabled = true
