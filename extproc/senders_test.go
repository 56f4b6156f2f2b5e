package extproc

import (
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestSenderPool checks that a delivery goes to a waiting sender rather
// than a new goroutine, that one stuck in its delivery does not hold up
// the next, that a sender exits after senderIdle without work, and that
// Wait ends the waiting ones.
func TestSenderPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSenderPool()
		var ran atomic.Int64
		base := runtime.NumGoroutine()
		p.Go(func() { ran.Add(1) })
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 1 {
			t.Fatalf("%d senders after one delivery, want 1 waiting", n)
		}
		for range 3 { // each goes to the waiting sender
			p.Go(func() { ran.Add(1) })
			synctest.Wait()
		}
		if n := runtime.NumGoroutine() - base; n != 1 || ran.Load() != 4 {
			t.Fatalf("%d senders, %d deliveries; want 1 sender, 4 deliveries", n, ran.Load())
		}

		block := make(chan struct{})
		p.Go(func() { <-block }) // the waiting sender is now stuck
		synctest.Wait()
		p.Go(func() { ran.Add(1) })
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 2 || ran.Load() != 5 {
			t.Fatalf("%d senders, %d deliveries; want a second sender and 5 deliveries", n, ran.Load())
		}
		close(block)
		synctest.Wait()

		time.Sleep(senderIdle + time.Millisecond)
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 0 {
			t.Fatalf("%d senders after %v idle, want 0", n, senderIdle)
		}

		p.Go(func() { ran.Add(1) })
		synctest.Wait()
		p.Wait()
		if n := runtime.NumGoroutine() - base; n != 0 {
			t.Fatalf("%d senders after Wait, want 0", n)
		}
	})
}
