package kubefixture

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/test/poll"
)

// Run runs a source's Run (or anything else that runs until its context
// is canceled) until the test ends, or until the returned stop is called,
// and checks that it returns nil; stop waits for Run to return, so
// everything the source logged is written by then.
func Run(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Settle lets a source inside a testing/synctest bubble finish with what it
// was sent: every goroutine waits, then the fake clock passes any debounce
// (a second is far more than the tests use) and everything settles again.
// Run in a bubble only.
func Settle() {
	synctest.Wait()
	time.Sleep(time.Second)
	synctest.Wait()
}

// Eventually waits up to d for cond and returns how long that took. Run it
// in a testing/synctest bubble only: it checks cond every 5 ms of the fake
// clock, as client-go's leader election retries at jittered (random)
// instants that a test cannot name in advance.
func Eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return poll.Until(t, d, 5*time.Millisecond, what, cond)
}
