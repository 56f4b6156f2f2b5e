package zmtp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// acceptRetry is the pause after a failed Accept (out of file
// descriptors, say) before the next.
const acceptRetry = 50 * time.Millisecond

// Listener is a SUB socket that PUB peers connect to: it yields the
// messages of all of them. A peer that breaks a limit or the protocol
// loses its own connection only.
type Listener struct {
	ln     net.Listener
	o      Options
	prefix []byte
	b      *budget
	msgs   chan *Message
	done   chan struct{}
	stop   func() bool
	once   sync.Once
	wg     sync.WaitGroup

	// mu guards conns.
	mu    sync.Mutex
	conns map[*conn]struct{}
}

// ServeSub serves ln (from Bind, or any stream listener) as a SUB listener
// that subscribes every peer that connects to the messages whose first
// frame starts with prefix. ctx ending closes the listener; so does Close.
// The Listener owns ln from then on and closes it.
func ServeSub(ctx context.Context, ln net.Listener, prefix []byte, o Options) *Listener {
	o = o.withDefaults()
	l := &Listener{
		ln: ln, o: o, prefix: bytes.Clone(prefix), b: &budget{limit: o.MaxBuffered},
		msgs: make(chan *Message, o.QueueLen), done: make(chan struct{}), conns: make(map[*conn]struct{}),
	}
	l.wg.Go(l.accept)
	l.stop = context.AfterFunc(ctx, l.shutdown)
	return l
}

// Endpoint returns the endpoint peers reach the listener at (with the
// port chosen when the endpoint asked for port 0).
func (l *Listener) Endpoint() string { return EndpointOf(l.ln.Addr()) }

// Messages returns the messages of every peer, in the order each peer
// sent them. Release each once done with it. It is closed once the
// listener is closed (Close, or the end of its context).
func (l *Listener) Messages() <-chan *Message { return l.msgs }

// Close stops listening, closes every connection and waits for their
// goroutines; then Messages is closed.
func (l *Listener) Close() error {
	l.stop()
	l.shutdown()
	return nil
}

func (l *Listener) shutdown() {
	l.once.Do(func() {
		close(l.done)
		_ = l.ln.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.shut()
		}
		l.mu.Unlock()
		l.wg.Wait()
		close(l.msgs)
		for m := range l.msgs {
			m.Release()
		}
	})
}

func (l *Listener) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// accept accepts connections until the listener closes.
func (l *Listener) accept() {
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if l.closed() || errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-l.done:
				return
			case <-time.After(acceptRetry):
			}
			continue
		}
		c := newConn(nc, &l.o, l.b)
		if err := l.track(c); err != nil {
			c.shut()
			l.report(err)
			continue
		}
		l.wg.Go(func() { l.serve(c) })
	}
}

// track adds c to the connections, unless there are MaxConns already or
// the listener is closed.
func (l *Listener) track(c *conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed() {
		return ErrClosed
	}
	if len(l.conns) >= l.o.MaxConns {
		return ErrTooManyConns
	}
	l.conns[c] = struct{}{}
	return nil
}

func (l *Listener) untrack(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

// report passes a peer's error to OnPeerError, unless this side closed the
// connection.
func (l *Listener) report(err error) {
	if l.o.OnPeerError != nil && !errors.Is(err, ErrClosed) {
		l.o.OnPeerError(err)
	}
}

// serve handshakes with one peer, subscribes it, and queues its messages
// until the connection ends.
func (l *Listener) serve(c *conn) {
	defer l.untrack(c)
	defer c.shut()
	err := c.handshake(typeSub, time.Now())
	if err == nil {
		err = c.writeMessage(append([]byte{1}, l.prefix...))
	}
	for err == nil {
		var m *Message
		if m, err = c.readMessage(); err != nil {
			break
		}
		if !bytes.HasPrefix(m.Frames[0], l.prefix) {
			m.Release() // a publisher that ignores subscriptions
			continue
		}
		select {
		case l.msgs <- m:
		case <-l.done:
			m.Release()
			return
		}
	}
	l.report(c.closedError(err))
}
