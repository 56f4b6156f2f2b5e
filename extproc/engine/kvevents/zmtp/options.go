package zmtp

import (
	"context"
	"net"
	"time"
)

// Defaults for Options.
const (
	DefaultMaxFrameSize     = 16 << 20
	DefaultMaxFrames        = 8
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultWriteTimeout     = 5 * time.Second
	DefaultMaxConns         = 1024
	DefaultQueueLen         = 16
	// messageSlack is what MaxMessageSize adds to MaxFrameSize by default,
	// for the frames around the largest one.
	messageSlack = 64 << 10
)

// Options are a socket's limits. The zero value means every default.
type Options struct {
	// MaxFrameSize bounds one frame's body, checked as its header is read;
	// 0 means DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxFrames bounds the frames of one message, checked as each frame
	// starts; 0 means DefaultMaxFrames.
	MaxFrames int
	// MaxMessageSize bounds the frames of one message together; 0 means
	// MaxFrameSize plus 64 KiB.
	MaxMessageSize int
	// HandshakeTimeout bounds the connect (when dialling) and the exchange
	// of greetings and READY commands; 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write; 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration

	// MaxConns bounds a listener's connections, handshaking ones included;
	// more are closed at once. 0 means DefaultMaxConns.
	MaxConns int
	// QueueLen bounds a listener's received messages waiting for Messages'
	// reader; a connection whose message cannot be queued stops reading
	// (the peer's own queue fills and it drops, as ZeroMQ does). 0 means
	// DefaultQueueLen.
	QueueLen int
	// MaxBuffered bounds the bytes a listener's messages hold, queued or
	// still being read, until they are released; a connection whose next
	// bytes would pass it is closed with ErrOverloaded. 0 means four times
	// MaxMessageSize; it is never less than MaxMessageSize.
	MaxBuffered int
	// OnPeerError, when set, is called with the error that ended or
	// refused each of a listener's connections (but not those the
	// listener's Close ends). It runs on the connection's goroutine and
	// must not block.
	OnPeerError func(error)

	// Dial, when set, replaces net.Dialer's DialContext (tests, custom
	// transports).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

func (o Options) withDefaults() Options {
	set := func(p *int, d int) {
		if *p <= 0 {
			*p = d
		}
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	set(&o.MaxFrameSize, DefaultMaxFrameSize)
	set(&o.MaxFrames, DefaultMaxFrames)
	set(&o.MaxMessageSize, o.MaxFrameSize+messageSlack)
	setDur(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&o.WriteTimeout, DefaultWriteTimeout)
	set(&o.MaxConns, DefaultMaxConns)
	set(&o.QueueLen, DefaultQueueLen)
	set(&o.MaxBuffered, 4*o.MaxMessageSize)
	o.MaxBuffered = max(o.MaxBuffered, o.MaxMessageSize)
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	return o
}
