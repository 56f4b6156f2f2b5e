package zmtp

import (
	"bytes"
	"context"
	"sync"
)

// Sub is a SUB socket connected to one PUB.
type Sub struct {
	c      *conn
	prefix []byte
	msgs   chan *Message
	done   chan struct{}
	stop   func() bool // undoes the close on ctx's end
	once   sync.Once
	wg     sync.WaitGroup
	err    error // why msgs was closed; written before it is
}

// DialSub connects to the PUB at endpoint and subscribes to the messages
// whose first frame starts with prefix (all of them when it is empty).
// The connect and handshake end within o.HandshakeTimeout. ctx ending
// closes the socket; so does Close.
func DialSub(ctx context.Context, endpoint string, prefix []byte, o Options) (*Sub, error) {
	o = o.withDefaults()
	c, stop, err := dialHandshake(ctx, endpoint, typeSub, &o)
	if err != nil {
		return nil, err
	}
	s := &Sub{c: c, prefix: bytes.Clone(prefix), msgs: make(chan *Message), done: make(chan struct{}), stop: stop}
	if err := c.writeMessage(append([]byte{1}, prefix...)); err != nil {
		err = c.closedError(err)
		s.close()
		return nil, err
	}
	s.wg.Go(s.read)
	return s, nil
}

// Messages returns the received messages. It is closed when the
// connection ends; Err then tells why.
func (s *Sub) Messages() <-chan *Message { return s.msgs }

// Err returns why Messages was closed: ErrClosed after Close or the end of
// the context, the error that ended the connection otherwise. Call it only
// after Messages is closed.
func (s *Sub) Err() error { return s.err }

// Close closes the connection and waits for its reader.
func (s *Sub) Close() error {
	s.close()
	s.wg.Wait()
	return nil
}

func (s *Sub) close() {
	s.once.Do(func() {
		s.stop()
		close(s.done)
		s.c.shut()
	})
}

// read passes the connection's messages to s.msgs until it ends.
func (s *Sub) read() {
	defer close(s.msgs)
	for {
		m, err := s.c.readMessage()
		if err != nil {
			s.err = s.c.closedError(err)
			return
		}
		if !bytes.HasPrefix(m.Frames[0], s.prefix) {
			continue // a publisher that ignores subscriptions
		}
		select {
		case s.msgs <- m:
		case <-s.done:
			m.Release()
			s.err = ErrClosed
			return
		}
	}
}
