package zmtp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/test/memnet"
)

// memPub listens on an in-memory network; its connections go to the
// returned channel. The Options dial that network.
func memPub(t *testing.T) (endpoint string, o Options, peers <-chan net.Conn) {
	t.Helper()
	var n memnet.Network
	ln, addr := n.Listen()
	ch := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(ch)
		for c := range ch {
			_ = c.Close()
		}
	})
	return "tcp://" + addr, Options{Dial: n.Dial}, ch
}

// subscribed dials a SUB to a fresh in-memory peer, completes the peer's
// side of the handshake and reads the subscription.
func subscribed(t *testing.T, o Options, prefix string) (*Sub, *peer) {
	t.Helper()
	endpoint, mo, peers := memPub(t)
	o.Dial = mo.Dial
	type result struct {
		s   *Sub
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := DialSub(t.Context(), endpoint, []byte(prefix), o)
		res <- result{s, err}
	}()
	p := newPeer(t, <-peers)
	t.Cleanup(func() { _ = p.nc.Close() })
	p.handshake("PUB")
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = r.s.Close() })
	sub, err := p.frame()
	if err != nil || !bytes.Equal(sub, append([]byte{1}, prefix...)) {
		t.Fatalf("subscription %q, %v", sub, err)
	}
	return r.s, p
}

func recv(t *testing.T, s *Sub) *Message {
	t.Helper()
	m, ok := <-s.Messages()
	if !ok {
		t.Fatalf("connection ended: %v", s.Err())
	}
	return m
}

// TestDialSubReceives: messages of several frames (short and long
// headers), a message outside the prefix dropped, a PING answered.
func TestDialSubReceives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, p := subscribed(t, Options{}, "kv@")
		payload := bytes.Repeat([]byte{7}, 300)
		p.send([]byte("other"), []byte("x"))
		p.send([]byte("kv@w@m"), []byte("12345678"), payload)
		p.write(appendCommand(nil, "PING", []byte{0, 10}, []byte("ctx")))
		p.send([]byte("kv@"), nil)
		m := recv(t, s)
		if len(m.Frames) != 3 || string(m.Frames[0]) != "kv@w@m" || !bytes.Equal(m.Frames[2], payload) {
			t.Fatalf("message %q", m.Frames)
		}
		pong, err := p.frame()
		if err != nil || string(pong) != "\x04PONGctx" {
			t.Errorf("PONG %q, %v", pong, err)
		}
		if m := recv(t, s); len(m.Frames) != 2 || len(m.Frames[1]) != 0 {
			t.Errorf("message %q", m.Frames)
		}
		_ = p.nc.Close()
		if _, ok := <-s.Messages(); ok || Reason(s.Err()) != "closed" {
			t.Errorf("after the peer closed: %v (%s)", s.Err(), Reason(s.Err()))
		}
	})
}

// TestDialSubLimits: each hostile stream ends the connection with its
// error, before anything the peer announced is allocated.
func TestDialSubLimits(t *testing.T) {
	o := Options{MaxFrameSize: 1 << 10, MaxFrames: 3, MaxMessageSize: 1500}
	cases := []struct {
		name string
		send func(p *peer)
		want error
	}{
		{"frame of 2^40 bytes", func(p *peer) { p.write(longHeader(0, 1<<40)) }, ErrFrameTooLarge},
		{"frame of 2^64-1 bytes", func(p *peer) { p.write(longHeader(flagMore, 1<<64-1)) }, ErrFrameTooLarge},
		{"frame over the limit", func(p *peer) { p.write(longHeader(0, 1<<10+1)) }, ErrFrameTooLarge},
		{"message over the limit", func(p *peer) {
			p.send(make([]byte, 1000), make([]byte, 1000))
		}, ErrMessageTooLarge},
		{"too many frames", func(p *peer) { p.send(nil, nil, nil, nil) }, ErrTooManyFrames},
		{"reserved flags", func(p *peer) { p.write([]byte{0x08, 0}) }, ErrProtocol},
		{"command inside a message", func(p *peer) {
			p.write([]byte{flagMore, 0})
			p.write(appendCommand(nil, "PING", []byte{0, 1}))
		}, ErrProtocol},
		{"command flagged more", func(p *peer) { p.write([]byte{flagCommand | flagMore, 0}) }, ErrProtocol},
		{"command over its limit", func(p *peer) { p.write(longHeader(flagCommand, maxCommandSize+1)) }, ErrProtocol},
		{"malformed command", func(p *peer) { p.write([]byte{flagCommand, 2, 9, 'x'}) }, ErrProtocol},
		{"malformed PING", func(p *peer) { p.write(appendCommand(nil, "PING", []byte{0})) }, ErrProtocol},
		{"ERROR", func(p *peer) { p.write(appendCommand(nil, "ERROR", []byte("\x03bad"))) }, ErrPeer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, p := subscribed(t, o, "")
				go func() { _, _ = io.Copy(io.Discard, p.r) }()
				c.send(p)
				if m, ok := <-s.Messages(); ok {
					t.Fatalf("got a message %q", m.Frames)
				}
				if !errors.Is(s.Err(), c.want) {
					t.Errorf("error %v, want %v", s.Err(), c.want)
				}
			})
		})
	}
}

// TestDialSubEndlessMoreFrames: a peer streaming 20 M empty frames flagged
// MORE is cut off after MaxFrames, having sent a few kilobytes.
func TestDialSubEndlessMoreFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, p := subscribed(t, Options{MaxFrames: 4}, "")
		sent := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			frame := []byte{flagMore, 0}
			for sent < 20_000_000 {
				if _, err := p.nc.Write(frame); err != nil {
					return
				}
				sent++
			}
		}()
		if _, ok := <-s.Messages(); ok || !errors.Is(s.Err(), ErrTooManyFrames) {
			t.Fatalf("error %v, want %v", s.Err(), ErrTooManyFrames)
		}
		_ = s.Close()
		<-done
		// The in-memory connection buffers 1 MiB: the peer got that far.
		if sent >= 1<<20 {
			t.Errorf("the peer sent %d frames before the connection closed", sent)
		}
	})
}

// TestHandshakeFailures: a peer that is not a ZMTP 3 PUB with the NULL
// mechanism is refused with a typed error within the handshake timeout.
func TestHandshakeFailures(t *testing.T) {
	notNull := greeting
	copy(notNull[12:32], "PLAIN")
	zmtp2 := greeting
	zmtp2[10] = 2
	trailing := greeting
	trailing[20] = 'x'
	ready := func(props ...[]byte) []byte { return appendCommand(nil, "READY", props...) }
	cases := []struct {
		name string
		send [][]byte
		want error
	}{
		{"silent", nil, ErrHandshakeTimeout},
		{"HTTP", [][]byte{[]byte("HTTP/1.1 400 Bad Request\r\n\r\n")}, ErrGreeting},
		{"PLAIN", [][]byte{notNull[:]}, ErrGreeting},
		{"ZMTP 2", [][]byte{zmtp2[:]}, ErrGreeting},
		{"mechanism padding", [][]byte{trailing[:]}, ErrGreeting},
		{"greeting then silence", [][]byte{greeting[:]}, ErrHandshakeTimeout},
		{"half a greeting", [][]byte{greeting[:30]}, ErrHandshakeTimeout},
		{"SUB peer", [][]byte{greeting[:], ready(property("Socket-Type", []byte("SUB")))}, ErrHandshake},
		{"no socket type", [][]byte{greeting[:], ready(property("Identity", nil))}, ErrHandshake},
		{"long identity", [][]byte{greeting[:], ready(property("Socket-Type", []byte("PUB")), property("Identity", make([]byte, 256)))}, ErrHandshake},
		{"bad metadata", [][]byte{greeting[:], appendCommand(nil, "READY", []byte{11, 'S'})}, ErrHandshake},
		{"value past the end", [][]byte{greeting[:], appendCommand(nil, "READY", []byte{1, 'S', 0, 0, 1, 0, 'x'})}, ErrHandshake},
		{"a message first", [][]byte{greeting[:], {0, 1, 'x'}}, ErrHandshake},
		{"another command", [][]byte{greeting[:], appendCommand(nil, "HELLO")}, ErrHandshake},
		{"ERROR", [][]byte{greeting[:], appendCommand(nil, "ERROR", []byte("\x06denied"))}, ErrPeer},
		{"huge READY", [][]byte{greeting[:], longHeader(flagCommand, 1<<40)}, ErrProtocol},
		{"closed", [][]byte{greeting[:11]}, io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				endpoint, o, peers := memPub(t)
				o.HandshakeTimeout = 3 * time.Second
				go func() {
					nc := <-peers
					defer nc.Close()
					go func() { _, _ = io.Copy(io.Discard, nc) }()
					for _, b := range c.send {
						_, _ = nc.Write(b)
					}
					if c.name == "closed" {
						return
					}
					<-t.Context().Done()
				}()
				start := time.Now()
				_, err := DialSub(t.Context(), endpoint, nil, o)
				// A peer that closes mid-handshake fails our read or, as it
				// races our greeting, our write.
				closedFirst := c.name == "closed" && errors.Is(err, io.ErrClosedPipe)
				if !errors.Is(err, c.want) && !closedFirst {
					t.Errorf("error %v, want %v", err, c.want)
				}
				if d := time.Since(start); d > o.HandshakeTimeout {
					t.Errorf("the handshake took %v, more than its timeout", d)
				}
			})
		})
	}
}

// TestDialSubCancel: the end of the context ends a handshake in progress
// and a connected socket, whatever the peer does.
func TestDialSubCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		endpoint, o, peers := memPub(t)
		o.HandshakeTimeout = time.Hour
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		_, err := DialSub(ctx, endpoint, nil, o)
		if !errors.Is(err, ErrClosed) {
			t.Errorf("a handshake cancelled: %v", err)
		}
		(<-peers).Close()
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		endpoint, o, peers := memPub(t)
		go func() {
			p := newPeer(t, <-peers)
			defer p.nc.Close()
			p.handshake("XPUB")
			<-t.Context().Done()
		}()
		s2, err := DialSub(ctx, endpoint, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, ok := <-s2.Messages(); ok || !errors.Is(s2.Err(), ErrClosed) {
			t.Errorf("after the context ended: %v", s2.Err())
		}
		_ = s2.Close()
	})
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		nil:                            "",
		io.EOF:                         "closed",
		errors.New("reset"):            "io",
		ErrFrameTooLarge:               "frame_too_large",
		ErrTooManyConns:                "too_many_connections",
		errors.Join(ErrClosed, io.EOF): "closed_locally",
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestSplitEndpoint(t *testing.T) {
	for _, c := range []struct {
		endpoint, network, address string
		listen                     bool
	}{
		{"tcp://127.0.0.1:5557", "tcp", "127.0.0.1:5557", false},
		{"tcp://[::1]:5557", "tcp", "[::1]:5557", false},
		{"tcp://*:5557", "tcp", ":5557", true},
		{"ipc:///tmp/x.sock", "unix", "/tmp/x.sock", false},
	} {
		n, a, err := splitEndpoint(c.endpoint, c.listen)
		if err != nil || n != c.network || a != c.address {
			t.Errorf("splitEndpoint(%q) = %s %s %v", c.endpoint, n, a, err)
		}
	}
	for _, bad := range []string{"tcp://*:5557", "tcp://:5557", "tcp://h", "ipc://", "udp://h:1", "h:1"} {
		if _, _, err := splitEndpoint(bad, false); err == nil || !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("splitEndpoint(%q) accepted: %v", bad, err)
		}
	}
}
