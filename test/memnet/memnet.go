// Package memnet is an in-memory network for tests that run in a
// testing/synctest bubble, where a goroutine blocked on a socket would keep
// the fake clock from moving. Listeners get addresses Host:port that Dial
// reaches; an address nothing listens on refuses the connection as TCP
// would. Nothing touches a socket.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/test/bufconn"
)

const (
	// Host is the IP of every address (in TEST-NET-1, 192.0.2.0/24, which
	// no real network routes).
	Host = "192.0.2.1"
	// firstPort is the first port given out.
	firstPort = 10000
	// bufferSize is each connection direction's buffer.
	bufferSize = 1 << 20
)

// Network is a set of in-memory listeners. Its methods are safe for
// concurrent use; the zero value is ready.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*bufconn.Listener
	next      uint32
}

// Listen returns a new listener and the address that reaches it.
func (n *Network) Listen() (net.Listener, string) {
	addr := n.Reserve()
	l := bufconn.Listen(bufferSize)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = map[string]*bufconn.Listener{}
	}
	n.listeners[addr] = l
	return listener{l}, addr
}

// Reserve returns a fresh address that nothing listens on. A Network has
// 55,535 addresses.
func (n *Network) Reserve() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	port := firstPort + n.next
	if port > 65535 {
		panic("memnet: out of ports")
	}
	n.next++
	return net.JoinHostPort(Host, fmt.Sprint(port))
}

// Dial connects to the listener at addr. A closed listener or an address
// nothing listens on gives a dial *net.OpError wrapping ECONNREFUSED.
func (n *Network) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l != nil {
		c, err := l.DialContext(ctx)
		if err == nil {
			return &conn{Conn: c}, nil
		}
		if ctx.Err() != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		}
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("connect to %s: %w", addr, syscall.ECONNREFUSED)}
}

// listener hands out conns.
type listener struct{ *bufconn.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

// conn is a bufconn connection whose read deadline behaves. bufconn arms
// a timer per deadline and cannot take back one that has already fired,
// so a deadline that passed and was then cleared can still time out a
// later Read. net/http's server does exactly that when a keep-alive
// connection's next request arrives during its background read, and the
// handler's request context would be cancelled. A read timeout the current
// deadline does not explain is cleared and the Read goes on. (Write
// deadlines pass through: bufconn's Write does not say how much it wrote
// before a timeout, and nothing here clears a passed write deadline.)
type conn struct {
	net.Conn
	mu   sync.Mutex
	read time.Time // the read deadline in force
}

func (c *conn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		var ne net.Error
		if n > 0 || !errors.As(err, &ne) || !ne.Timeout() || !c.clearedLate() {
			return n, err
		}
	}
}

// clearedLate reports whether a read timeout came from a deadline no
// longer in force, and re-arms the current one, which clears it.
func (c *conn) clearedLate() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && !time.Now().Before(c.read) {
		return false
	}
	_ = c.Conn.SetReadDeadline(c.read)
	return true
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read = t
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}
