package zmtp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/test/memnet"
)

// memListener serves a SUB listener on an in-memory network; errs gets
// what OnPeerError reports.
func memListener(t *testing.T, o Options) (l *Listener, dial func() net.Conn, errs <-chan error) {
	t.Helper()
	var n memnet.Network
	ln, addr := n.Listen()
	ch := make(chan error, 64)
	o.OnPeerError = func(err error) { ch <- err }
	l = ServeSub(t.Context(), ln, []byte("kv@"), o)
	t.Cleanup(func() { _ = l.Close() })
	return l, func() net.Conn {
		c, err := n.Dial(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, ch
}

// publisher connects a PUB peer and reads its subscription.
func publisher(t *testing.T, dial func() net.Conn) *peer {
	t.Helper()
	p := newPeer(t, dial())
	p.handshake("PUB")
	if sub, err := p.frame(); err != nil || string(sub) != "\x01kv@" {
		t.Fatalf("subscription %q, %v", sub, err)
	}
	return p
}

func next(t *testing.T, l *Listener) *Message {
	t.Helper()
	m, ok := <-l.Messages()
	if !ok {
		t.Fatal("Messages closed")
	}
	return m
}

// TestListenerBadPeerLosesOnlyItsConnection: of two publishers, the one
// that announces a 2^40-byte frame is disconnected and reported; the other
// goes on.
func TestListenerBadPeerLosesOnlyItsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, dial, errs := memListener(t, Options{})
		good, bad := publisher(t, dial), publisher(t, dial)
		good.send([]byte("kv@good"), []byte("1"))
		if m := next(t, l); string(m.Frames[0]) != "kv@good" {
			t.Fatalf("message %q", m.Frames)
		}
		bad.send([]byte("ignored topic"), []byte("1"))
		bad.write(longHeader(flagMore, 1<<40))
		if err := <-errs; !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("reported %v, want %v", err, ErrFrameTooLarge)
		}
		if _, err := bad.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("the bad peer's connection: %v, want EOF", err)
		}
		good.send([]byte("kv@good"), []byte("2"))
		if m := next(t, l); string(m.Frames[1]) != "2" {
			t.Errorf("message %q", m.Frames)
		}
	})
}

// TestListenerMaxConns: connections past MaxConns are closed at once; a
// peer that never completes its handshake is closed at its timeout and
// frees its place.
func TestListenerMaxConns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, dial, errs := memListener(t, Options{MaxConns: 1, HandshakeTimeout: 2 * time.Second})
		silent := dial()
		start := time.Now()
		refused := newPeer(t, dial())
		if err := <-errs; !errors.Is(err, ErrTooManyConns) {
			t.Errorf("reported %v, want %v", err, ErrTooManyConns)
		}
		if _, err := refused.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("the refused connection: %v, want EOF", err)
		}
		go func() { _, _ = io.Copy(io.Discard, silent) }()
		if err := <-errs; !errors.Is(err, ErrHandshakeTimeout) {
			t.Errorf("reported %v, want %v", err, ErrHandshakeTimeout)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("the silent peer was closed after %v", d)
		}
		synctest.Wait() // the silent peer's place is free once its goroutine ends
		p := publisher(t, dial)
		p.send([]byte("kv@x"))
		if m := next(t, l); string(m.Frames[0]) != "kv@x" {
			t.Errorf("message %q", m.Frames)
		}
	})
}

// TestListenerBudget: unreleased messages count against MaxBuffered; the
// connection whose bytes would pass it is closed, and releasing them makes
// room again.
func TestListenerBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, dial, errs := memListener(t, Options{MaxFrameSize: 1000, MaxMessageSize: 1000, MaxBuffered: 2500})
		p := publisher(t, dial)
		for range 3 {
			p.send([]byte("kv@"), make([]byte, 900))
		}
		if err := <-errs; !errors.Is(err, ErrOverloaded) {
			t.Fatalf("reported %v, want %v", err, ErrOverloaded)
		}
		a, b := next(t, l), next(t, l)
		a.Release()
		b.Release()
		b.Release() // a second release gives nothing back twice
		if l.b.used != 0 {
			t.Errorf("%d bytes held after every message was released", l.b.used)
		}
		p = publisher(t, dial)
		for range 2 {
			p.send([]byte("kv@"), make([]byte, 900))
		}
		next(t, l).Release()
		next(t, l).Release()
	})
}

// TestListenerClose: Close returns while peers are silent, mid-handshake
// or blocked on a full queue, and closes Messages.
func TestListenerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, dial, _ := memListener(t, Options{QueueLen: 1, HandshakeTimeout: time.Hour})
		_ = dial() // silent
		p := publisher(t, dial)
		for range 3 {
			p.send([]byte("kv@"), []byte("x"))
		}
		synctest.Wait()
		_ = l.Close()
		for m := range l.Messages() {
			m.Release()
		}
		if l.b.used != 0 {
			t.Errorf("%d bytes held after Close", l.b.used)
		}
	})
}

// TestListenerContext: the end of the listener's context closes it.
func TestListenerContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n memnet.Network
		ln, addr := n.Listen()
		ctx, cancel := context.WithCancel(t.Context())
		l := ServeSub(ctx, ln, nil, Options{})
		c, err := n.Dial(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cancel()
		for range l.Messages() {
		}
		if _, err := n.Dial(t.Context(), "tcp", addr); err == nil {
			t.Error("the listener still accepts after its context ended")
		}
	})
}

// TestListenSubTCP: a real listener on loopback and its endpoint.
func TestListenSubTCP(t *testing.T) {
	l, err := listenSub(t.Context(), "tcp://127.0.0.1:0", []byte("kv@"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Endpoint()[len("tcp://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := newPeer(t, nc)
	p.handshake("PUB")
	if sub, err := p.frame(); err != nil || !bytes.Equal(sub, []byte("\x01kv@")) {
		t.Fatalf("subscription %q, %v", sub, err)
	}
	p.send([]byte("kv@w"), []byte("x"))
	if m := next(t, l); string(m.Frames[1]) != "x" {
		t.Errorf("message %q", m.Frames)
	}
}
