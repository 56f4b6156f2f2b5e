package zmtp

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-zeromq's PUB socket (the interop tests' independent peer) never
	// stops its writer goroutine.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// peer is the far side of a connection, driven byte by byte by a test.
type peer struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func newPeer(t testing.TB, nc net.Conn) *peer {
	return &peer{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// handshake completes the handshake as a socket of type socketType.
func (p *peer) handshake(socketType string) {
	p.t.Helper()
	p.write(greeting[:])
	p.write(appendCommand(nil, "READY", property("Socket-Type", []byte(socketType))))
	var g [greetingSize]byte
	if _, err := io.ReadFull(p.r, g[:]); err != nil {
		p.t.Errorf("peer: reading the greeting: %v", err)
		return
	}
	if _, err := p.frame(); err != nil {
		p.t.Errorf("peer: reading READY: %v", err)
	}
}

// frame reads one frame's body.
func (p *peer) frame() ([]byte, error) {
	flags, err := p.r.ReadByte()
	if err != nil {
		return nil, err
	}
	size := uint64(0)
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(p.r, b[:]); err != nil {
			return nil, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := p.r.ReadByte()
		if err != nil {
			return nil, err
		}
		size = uint64(b)
	}
	body := make([]byte, size)
	_, err = io.ReadFull(p.r, body)
	return body, err
}

func (p *peer) write(b []byte) {
	p.t.Helper()
	if _, err := p.nc.Write(b); err != nil {
		p.t.Errorf("peer: write: %v", err)
	}
}

// send sends one message.
func (p *peer) send(frames ...[]byte) {
	p.t.Helper()
	var buf []byte
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		buf = appendFrame(buf, flags, f)
	}
	p.write(buf)
}

// longHeader is the header of a frame announcing size bytes.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

// listenSub binds endpoint and serves it as a SUB listener (Bind, then
// ServeSub).
func listenSub(ctx context.Context, endpoint string, prefix []byte, o Options) (*Listener, error) {
	ln, err := Bind(endpoint)
	if err != nil {
		return nil, err
	}
	return ServeSub(ctx, ln, prefix, o), nil
}
