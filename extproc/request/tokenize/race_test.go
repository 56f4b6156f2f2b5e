//go:build race

package tokenize

// raceEnabled shrinks the slow, single-goroutine comparison tests under the
// race detector, which only slows them down.
const raceEnabled = true
