//go:build race

package demo

// raceEnabled reports whether the race detector is on.
const raceEnabled = true
