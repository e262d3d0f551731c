//go:build race

package data

// raceEnabled reports a -race build, whose sync.Pool drops what it is
// given at random (to find misuse): a pooled fill allocates there.
const raceEnabled = true
