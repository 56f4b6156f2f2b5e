package zmtp

import (
	"errors"
	"io"
	"net"
	"os"
)

// Errors that end a connection. Each error a function of this package
// returns wraps at most one of them; Reason names it.
var (
	// ErrFrameTooLarge: a frame header announced more than MaxFrameSize.
	ErrFrameTooLarge = errors.New("zmtp: frame larger than the limit")
	// ErrMessageTooLarge: a message's frames add up to more than
	// MaxMessageSize.
	ErrMessageTooLarge = errors.New("zmtp: message larger than the limit")
	// ErrTooManyFrames: a message has more than MaxFrames frames.
	ErrTooManyFrames = errors.New("zmtp: message with more frames than the limit")
	// ErrGreeting: the peer's greeting is not ZMTP 3.x with the NULL
	// mechanism.
	ErrGreeting = errors.New("zmtp: bad greeting")
	// ErrHandshake: the peer's READY is malformed or names a socket type
	// this socket cannot talk to.
	ErrHandshake = errors.New("zmtp: bad handshake")
	// ErrHandshakeTimeout: the connect and handshake took longer than
	// HandshakeTimeout.
	ErrHandshakeTimeout = errors.New("zmtp: handshake timed out")
	// ErrWriteTimeout: a write took longer than WriteTimeout.
	ErrWriteTimeout = errors.New("zmtp: write timed out")
	// ErrProtocol: a frame or command breaks the protocol.
	ErrProtocol = errors.New("zmtp: protocol error")
	// ErrPeer: the peer sent an ERROR command.
	ErrPeer = errors.New("zmtp: the peer sent ERROR")
	// ErrOverloaded: a listener's buffered bytes reached MaxBuffered.
	ErrOverloaded = errors.New("zmtp: listener buffer full")
	// ErrTooManyConns: a listener already holds MaxConns connections.
	ErrTooManyConns = errors.New("zmtp: too many connections")
	// ErrDial: the connection could not be made.
	ErrDial = errors.New("zmtp: connect failed")
	// ErrClosed: the socket was closed, or its context ended.
	ErrClosed = errors.New("zmtp: closed")
)

// reasons names the sentinel errors for Reason, in the order checked.
var reasons = []struct {
	err  error
	name string
}{
	{ErrFrameTooLarge, "frame_too_large"},
	{ErrMessageTooLarge, "message_too_large"},
	{ErrTooManyFrames, "too_many_frames"},
	{ErrGreeting, "greeting"},
	{ErrHandshake, "handshake"},
	{ErrHandshakeTimeout, "handshake_timeout"},
	{ErrWriteTimeout, "write_timeout"},
	{ErrProtocol, "protocol"},
	{ErrPeer, "peer_error"},
	{ErrOverloaded, "overloaded"},
	{ErrTooManyConns, "too_many_connections"},
	{ErrDial, "dial"},
	{ErrClosed, "closed_locally"},
}

// Reason names why a connection ended, for a metric label: one of
// frame_too_large, message_too_large, too_many_frames, greeting, handshake,
// handshake_timeout, write_timeout, protocol, peer_error, overloaded,
// too_many_connections, dial, closed_locally, closed (the peer closed it)
// or io (any other read or write error). It is "" for a nil error.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "closed"
	}
	return "io"
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
