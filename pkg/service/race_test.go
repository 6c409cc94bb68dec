//go:build race

package service

// raceEnabled: the race detector is on; among other things, sync.Pool
// then drops a share of what is put back, at random.
const raceEnabled = true
