package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestDialReachesTheListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n Network
		l, addr := n.Listen()
		defer l.Close()
		other, _ := n.Listen()
		defer other.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
		c, err := n.Dial(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo %q, %v", buf, err)
		}
	})
}

func TestDialRefusesWhereNothingListens(t *testing.T) {
	var n Network
	l, addr := n.Listen()
	_ = l.Close()
	for _, a := range []string{n.Reserve(), addr} {
		_, err := n.Dial(context.Background(), "tcp", a)
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %s: %v, want a dial error wrapping ECONNREFUSED", a, err)
		}
	}
	if a, b := n.Reserve(), n.Reserve(); a == b {
		t.Errorf("two reservations share %s", a)
	}
}

// A deadline that has passed, then cleared, must not time out a later
// read: net/http's server does exactly this to stop its background read
// when a keep-alive connection's next request has already arrived.
func TestClearedDeadlineDoesNotFireLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n Network
		l, addr := n.Listen()
		defer l.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		c, err := n.Dial(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s := <-accepted
		defer s.Close()
		for i := range 100 {
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1)
			if _, err := s.Read(buf); err != nil {
				t.Fatalf("round %d: read with data waiting: %v", i, err)
			}
			_ = s.SetReadDeadline(time.Now().Add(-time.Second))
			_ = s.SetReadDeadline(time.Time{})
			go func() {
				time.Sleep(time.Millisecond)
				_, _ = c.Write([]byte("y"))
			}()
			if _, err := s.Read(buf); err != nil {
				t.Fatalf("round %d: read after the deadline was cleared: %v", i, err)
			}
		}
	})
}
