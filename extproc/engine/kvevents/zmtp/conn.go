package zmtp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// readBufferSize is each connection's read buffer.
	readBufferSize = 4 << 10
	// growChunk is how much a frame's body grows at a time as its bytes
	// arrive.
	growChunk = 64 << 10
)

// Message is one received message: at least one frame, at most MaxFrames,
// none larger than MaxFrameSize.
type Message struct {
	Frames [][]byte

	size int // bytes of Frames
	b    *budget
	held int // bytes counted against b
}

// Release gives the message's bytes back to its listener's budget; call it
// once done with a message from a Listener. It is a no-op for other
// messages and when called again.
func (m *Message) Release() {
	if m != nil && m.b != nil {
		m.b.give(m.held)
		m.b, m.held = nil, 0
	}
}

// hold counts n more bytes of m against b (nil: no budget).
func (m *Message) hold(b *budget, n int) error {
	if b == nil {
		return nil
	}
	if !b.take(n) {
		return fmt.Errorf("%w: %d bytes buffered", ErrOverloaded, b.limit)
	}
	m.b = b
	m.held += n
	return nil
}

// budget bounds the bytes a listener's messages hold.
type budget struct {
	limit int
	mu    sync.Mutex
	used  int
}

func (b *budget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// conn is one handshaken connection. Its methods are not safe for
// concurrent use: one goroutine reads and writes (a PONG is written by the
// reader).
type conn struct {
	nc   net.Conn
	r    *bufio.Reader
	o    *Options
	b    *budget // nil: no budget
	wbuf []byte
	cmd  []byte // a command's body, reused
	// closed is set when this side closes the connection, before it does.
	closed atomic.Bool
}

func newConn(nc net.Conn, o *Options, b *budget) *conn {
	return &conn{nc: nc, r: bufio.NewReaderSize(nc, readBufferSize), o: o, b: b}
}

// shut closes the connection from this side.
func (c *conn) shut() {
	c.closed.Store(true)
	_ = c.nc.Close()
}

// handshake exchanges greetings and READY commands as a socket of type
// self, within o.HandshakeTimeout of start.
func (c *conn) handshake(self string, start time.Time) error {
	if err := c.nc.SetDeadline(start.Add(c.o.HandshakeTimeout)); err != nil {
		return err
	}
	if err := c.greet(); err != nil {
		return handshakeError(err)
	}
	if err := c.ready(self); err != nil {
		return handshakeError(err)
	}
	return c.nc.SetDeadline(time.Time{})
}

// closedError is err, wrapped in ErrClosed when this side closed the
// connection.
func (c *conn) closedError(err error) error {
	if err != nil && c.closed.Load() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// handshakeError marks a deadline that passed during the handshake.
func handshakeError(err error) error {
	if isTimeout(err) {
		return fmt.Errorf("%w: %w", ErrHandshakeTimeout, err)
	}
	return err
}

// greet sends this side's greeting and checks the peer's, a part at a
// time so that a peer of another protocol is told apart early.
func (c *conn) greet() error {
	if _, err := c.nc.Write(greeting[:]); err != nil {
		return err
	}
	var g [greetingSize]byte
	if _, err := io.ReadFull(c.r, g[:10]); err != nil {
		return err
	}
	if err := checkSignature(g[:10]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.r, g[10:11]); err != nil {
		return unexpected(err)
	}
	if err := checkVersion(g[10]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.r, g[11:]); err != nil {
		return unexpected(err)
	}
	return checkMechanism(g[12:32])
}

// ready sends this side's READY and checks the peer's.
func (c *conn) ready(self string) error {
	if _, err := c.nc.Write(readyCommand(self)); err != nil {
		return err
	}
	flags, size, err := c.readHeader(false)
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 || flags&flagMore != 0 {
		return fmt.Errorf("%w: a message before READY", ErrHandshake)
	}
	name, data, err := c.readCommand(size)
	if err != nil {
		return err
	}
	switch name {
	case "READY":
		peer, err := peerSocketType(data)
		if err != nil {
			return err
		}
		return checkPeerType(self, peer)
	case "ERROR":
		return peerError(data)
	}
	return fmt.Errorf("%w: %q before READY", ErrHandshake, name)
}

// readHeader reads a frame header and checks its flags. inMessage tells
// that the frame continues a message, so that the connection ending there
// is unexpected.
func (c *conn) readHeader(inMessage bool) (flags byte, size uint64, err error) {
	flags, err = c.r.ReadByte()
	if err != nil {
		if inMessage && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, 0, fmt.Errorf("%w: reserved frame flags %#x", ErrProtocol, flags)
	}
	if flags&flagLong == 0 {
		b, err := c.r.ReadByte()
		if err != nil {
			return 0, 0, unexpected(err)
		}
		return flags, uint64(b), nil
	}
	var long [8]byte
	if _, err := io.ReadFull(c.r, long[:]); err != nil {
		return 0, 0, unexpected(err)
	}
	return flags, binary.BigEndian.Uint64(long[:]), nil
}

// unexpected turns io.EOF into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readCommand reads a command of size bytes and splits it into its name
// and data.
func (c *conn) readCommand(size uint64) (name string, data []byte, err error) {
	if size > maxCommandSize {
		return "", nil, fmt.Errorf("%w: command of %d bytes, limit %d", ErrProtocol, size, maxCommandSize)
	}
	if cap(c.cmd) < int(size) {
		c.cmd = make([]byte, size)
	}
	body := c.cmd[:size]
	if _, err := io.ReadFull(c.r, body); err != nil {
		return "", nil, unexpected(err)
	}
	return parseCommand(body)
}

// readMessage reads the next message, answering the commands before it.
func (c *conn) readMessage() (*Message, error) {
	m := &Message{}
	for {
		more, err := c.readFrame(m)
		if err != nil {
			m.Release()
			return nil, err
		}
		if !more && len(m.Frames) > 0 {
			return m, nil
		}
	}
}

// readFrame reads the next frame into m, or handles a command between
// messages; more reports whether m goes on.
func (c *conn) readFrame(m *Message) (more bool, err error) {
	flags, size, err := c.readHeader(len(m.Frames) > 0)
	if err != nil {
		return false, err
	}
	if flags&flagCommand != 0 {
		return false, c.command(flags, size, len(m.Frames) > 0)
	}
	if err := m.checkFrame(c.o, size); err != nil {
		return false, err
	}
	body, err := c.readBody(int(size), m)
	if err != nil {
		return false, err
	}
	m.Frames = append(m.Frames, body)
	m.size += len(body)
	return flags&flagMore != 0, nil
}

// checkFrame checks that a frame of size bytes may join m.
func (m *Message) checkFrame(o *Options, size uint64) error {
	switch {
	case len(m.Frames) >= o.MaxFrames:
		return fmt.Errorf("%w: frame %d, limit %d", ErrTooManyFrames, len(m.Frames)+1, o.MaxFrames)
	case size > uint64(o.MaxFrameSize):
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, size, o.MaxFrameSize)
	case size > uint64(o.MaxMessageSize-m.size):
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, uint64(m.size)+size, o.MaxMessageSize)
	}
	return nil
}

// readBody reads a frame body of n bytes, growing the buffer a chunk at a
// time as its bytes arrive: a peer that announces a large frame and sends
// little costs little. Each chunk is counted against the budget before it
// is allocated.
func (c *conn) readBody(n int, m *Message) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	var buf []byte
	for len(buf) < n {
		k := min(n-len(buf), growChunk)
		if err := m.hold(c.b, k); err != nil {
			return nil, err
		}
		if cap(buf)-len(buf) < k {
			grown := make([]byte, len(buf), min(max(2*cap(buf), len(buf)+k), n))
			copy(grown, buf)
			buf = grown
		}
		r, err := io.ReadFull(c.r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+r]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return buf, nil
}

// command handles a command frame between messages: PING is answered,
// ERROR ends the connection, others are ignored.
func (c *conn) command(flags byte, size uint64, inMessage bool) error {
	if flags&flagMore != 0 || inMessage {
		return fmt.Errorf("%w: command inside a message", ErrProtocol)
	}
	name, data, err := c.readCommand(size)
	if err != nil {
		return err
	}
	switch name {
	case "PING":
		// TTL (2 bytes), then a context of at most 16 bytes that the PONG
		// echoes.
		if len(data) < 2 || len(data) > 2+16 {
			return fmt.Errorf("%w: malformed PING", ErrProtocol)
		}
		return c.write(appendCommand(c.wbuf[:0], "PONG", data[2:]))
	case "ERROR":
		return peerError(data)
	}
	return nil
}

// peerError is the error an ERROR command's data reports.
func peerError(data []byte) error {
	reason := ""
	if len(data) > 0 && int(data[0]) <= len(data)-1 {
		reason = string(data[1 : 1+int(data[0])])
	}
	return fmt.Errorf("%w: %q", ErrPeer, reason)
}

// writeMessage sends one message.
func (c *conn) writeMessage(frames ...[]byte) error {
	buf := c.wbuf[:0]
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		buf = appendFrame(buf, flags, f)
	}
	return c.write(buf)
}

// write writes b within the write timeout.
func (c *conn) write(b []byte) error {
	c.wbuf = b
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.o.WriteTimeout)); err != nil {
		return err
	}
	if _, err := c.nc.Write(b); err != nil {
		if isTimeout(err) {
			return fmt.Errorf("%w: %w", ErrWriteTimeout, err)
		}
		return err
	}
	return nil
}
