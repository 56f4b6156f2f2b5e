package extproc

import (
	"sync"
	"time"
)

// senderIdle is how long a notice sender waits for the next delivery
// before it exits.
const senderIdle = time.Second

// senderPool runs the stream loops' deliveries (streamLoop.deliver) on
// goroutines that outlive one delivery: a new sender grows its stack at
// once (growStack), and one that waits for the next delivery keeps it. A
// delivery goes to an idle sender when one waits, else to a new one, so
// it never waits for another stream's Send. A sender exits after
// senderIdle without work, and at stop.
type senderPool struct {
	wg   sync.WaitGroup
	work chan func()
	// stop ends the waiting senders (Server.Wait).
	stop     chan struct{}
	stopOnce sync.Once
}

func newSenderPool() *senderPool {
	return &senderPool{work: make(chan func()), stop: make(chan struct{})}
}

// Go runs f on a sender.
func (p *senderPool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Go(func() { p.run(f) })
	}
}

func (p *senderPool) run(f func()) {
	growStack()
	t := time.NewTimer(senderIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(senderIdle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.stop:
			return
		}
	}
}

// Wait ends the waiting senders and blocks until every sender has exited.
func (p *senderPool) Wait() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
}
