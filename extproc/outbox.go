package extproc

import (
	"slices"
	"sync"
)

// outbox is an ordered queue of messages for one sender goroutine: the
// producers push under their own locks and never block, and the sender
// takes what is queued and sends it outside every lock. It is the relay's
// link to the scheduler and the scheduler's stream to a front.
type outbox[T any] struct {
	mu    sync.Mutex
	items []T
	// sealed: the sender stops once what is queued is sent.
	sealed bool
	ready  chan struct{}
}

func newOutbox[T any]() *outbox[T] { return &outbox[T]{ready: make(chan struct{}, 1)} }

// push queues v.
func (o *outbox[T]) push(v T) {
	o.mu.Lock()
	o.items = append(o.items, v)
	o.mu.Unlock()
	o.wake()
}

// replace overwrites the first queued message that match accepts, or
// queues v when none does.
func (o *outbox[T]) replace(match func(T) bool, v T) {
	o.mu.Lock()
	if i := slices.IndexFunc(o.items, match); i >= 0 {
		o.items[i] = v
		o.mu.Unlock()
		return
	}
	o.items = append(o.items, v)
	o.mu.Unlock()
	o.wake()
}

// seal makes the sender stop once what is queued is sent.
func (o *outbox[T]) seal() {
	o.mu.Lock()
	o.sealed = true
	o.mu.Unlock()
	o.wake()
}

func (o *outbox[T]) wake() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take waits until something is queued (or the box is sealed) and returns
// it, reusing buf's storage, with whether the box is sealed; ok is false
// when done closed first.
func (o *outbox[T]) take(done <-chan struct{}, buf []T) (batch []T, sealed, ok bool) {
	select {
	case <-done:
		return buf, false, false
	case <-o.ready:
	}
	clear(buf)
	o.mu.Lock()
	defer o.mu.Unlock()
	batch, o.items = o.items, buf[:0]
	return batch, o.sealed, true
}
