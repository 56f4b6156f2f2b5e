//go:build race

package sched

// simRaceEnabled reports whether the race detector is on.
const simRaceEnabled = true
