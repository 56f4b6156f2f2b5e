// Package poll waits, in tests, for a condition that another goroutine or
// process brings about.
package poll

import (
	"testing"
	"time"
)

// Until checks cond every interval until it holds and returns how long
// that took; t fails when it does not hold within d. In a testing/synctest
// bubble the clock is the bubble's.
func Until(t testing.TB, d, every time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(every)
	}
	return time.Since(start)
}
