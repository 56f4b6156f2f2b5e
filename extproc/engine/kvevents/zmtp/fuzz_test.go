package zmtp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"
)

// fuzzOptions are limits a fuzzer reaches, with frames large enough that
// allocating an announced size would show.
var fuzzOptions = Options{
	MaxFrameSize: 1 << 20, MaxFrames: 4, MaxMessageSize: 1<<20 + 1<<10, MaxBuffered: 4 << 20,
	HandshakeTimeout: time.Second, WriteTimeout: time.Second,
}.withDefaults()

// scriptConn is the peer side of a connection: reads return data, in
// chunks of the sizes listed (cycling; 0 stands for 256), and writes are
// discarded.
type scriptConn struct {
	data   []byte
	chunks []byte
	i      int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.chunks) > 0 {
		n = int(c.chunks[c.i%len(c.chunks)])
		if n == 0 {
			n = 256
		}
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// pubHello is a PUB's greeting and READY.
var pubHello = append(greeting[:], appendCommand(nil, "READY", property("Socket-Type", []byte("PUB")))...)

// received is what a receive path made of a byte stream.
type received struct {
	frames [][][]byte
	reason string
}

// receiveAll runs the handshake and reads messages until the stream ends,
// checking every message against the limits.
func receiveAll(t *testing.T, data, chunks []byte) received {
	o := fuzzOptions
	b := &budget{limit: o.MaxBuffered}
	c := newConn(&scriptConn{data: data, chunks: chunks}, &o, b)
	var out received
	err := c.handshake(typeSub, time.Now())
	for err == nil {
		var m *Message
		if m, err = c.readMessage(); err != nil {
			break
		}
		size := 0
		for _, f := range m.Frames {
			if len(f) > o.MaxFrameSize {
				t.Fatalf("a frame of %d bytes, limit %d", len(f), o.MaxFrameSize)
			}
			size += len(f)
		}
		if len(m.Frames) == 0 || len(m.Frames) > o.MaxFrames || size > o.MaxMessageSize {
			t.Fatalf("a message of %d frames, %d bytes", len(m.Frames), size)
		}
		if b.used > o.MaxBuffered {
			t.Fatalf("%d bytes held, limit %d", b.used, o.MaxBuffered)
		}
		out.frames = append(out.frames, m.Frames)
		m.Release()
	}
	if b.used != 0 {
		t.Fatalf("%d bytes held after every message was released", b.used)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF // where the stream stops is not the receiver's doing
	}
	out.reason = Reason(err)
	return out
}

// FuzzReceive feeds arbitrary bytes, as the peer of a SUB socket, through
// the handshake and the receive path: nothing panics, every message keeps
// the limits, memory grows with the bytes received and not with the sizes
// announced, and the result does not depend on how reads split the stream.
// With hello set the stream starts with a valid PUB greeting and READY.
func FuzzReceive(f *testing.F) {
	msg := func(frames ...[]byte) []byte {
		var b []byte
		for i, fr := range frames {
			fl := byte(0)
			if i < len(frames)-1 {
				fl = flagMore
			}
			b = appendFrame(b, fl, fr)
		}
		return b
	}
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	for _, seed := range [][]byte{
		msg([]byte("kv@w@m"), seq, bytes.Repeat([]byte{0x93}, 300)),
		append(msg([]byte("kv@"), nil), appendCommand(nil, "PING", []byte{0, 1}, []byte("c"))...),
		longHeader(0, 1<<40),
		longHeader(flagMore, 1<<20),
		bytes.Repeat([]byte{flagMore, 0}, 20),
		appendCommand(nil, "ERROR", []byte("\x02no")),
		append([]byte{flagMore, 0}, appendCommand(nil, "PING", []byte{0, 1})...),
		[]byte("HTTP/1.1 400 Bad Request\r\n\r\n"),
	} {
		f.Add(seed, []byte(nil), true)
		f.Add(seed, []byte{1, 3, 7}, true)
		f.Add(append(slices.Clone(pubHello), seed...), []byte{0}, false)
	}
	f.Fuzz(func(t *testing.T, data, chunks []byte, hello bool) {
		if hello {
			data = append(slices.Clone(pubHello), data...)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got := receiveAll(t, data, chunks)
		runtime.ReadMemStats(&after)
		// Each frame in progress may take one growth chunk ahead of its
		// bytes; the rest is proportional to the bytes received.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(64*len(data)+4*growChunk) {
			t.Errorf("%d bytes allocated for a stream of %d", alloc, len(data))
		}
		whole := receiveAll(t, data, nil)
		if got.reason != whole.reason || !slices.EqualFunc(got.frames, whole.frames, func(a, b [][]byte) bool {
			return slices.EqualFunc(a, b, bytes.Equal)
		}) {
			t.Errorf("read in chunks %v: %d messages, %s; read whole: %d messages, %s",
				chunks, len(got.frames), got.reason, len(whole.frames), whole.reason)
		}
	})
}
