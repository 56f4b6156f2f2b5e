package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// splitEndpoint turns tcp://HOST:PORT or ipc://PATH into a network and an
// address. A listener's host may be * (every interface) or empty.
func splitEndpoint(endpoint string, listen bool) (network, address string, err error) {
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", fmt.Errorf("zmtp: endpoint %q: %w", endpoint, err)
		}
		if host == "*" {
			if !listen {
				return "", "", fmt.Errorf("zmtp: endpoint %q: cannot dial *", endpoint)
			}
			host = ""
		}
		if (host == "" && !listen) || port == "" {
			return "", "", fmt.Errorf("zmtp: endpoint %q: want tcp://HOST:PORT", endpoint)
		}
		return "tcp", net.JoinHostPort(host, port), nil
	}
	if path, ok := strings.CutPrefix(endpoint, "ipc://"); ok && path != "" {
		return "unix", path, nil
	}
	return "", "", fmt.Errorf("zmtp: endpoint %q: want tcp://HOST:PORT or ipc://PATH", endpoint)
}

// EndpointOf returns the endpoint (tcp://HOST:PORT or ipc://PATH) that
// reaches a listener's address.
func EndpointOf(a net.Addr) string {
	if a.Network() == "unix" {
		return "ipc://" + a.String()
	}
	return "tcp://" + a.String()
}

// Bind listens on endpoint (tcp://HOST:PORT, HOST may be * or empty, or
// ipc://PATH) and accepts nothing yet: it is a SUB listener's first step, for a
// caller that must learn the endpoint (the port chosen for port 0) or a
// bind error before it starts any goroutine; ServeSub serves what it
// returns. A socket file left at an ipc:// path is removed first, as libzmq
// does.
func Bind(endpoint string) (net.Listener, error) {
	network, address, err := splitEndpoint(endpoint, true)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if fi, err := os.Lstat(address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(address)
		}
	}
	return net.Listen(network, address)
}

// dialHandshake connects to endpoint and performs the handshake as a
// socket of type self, both within o.HandshakeTimeout. ctx ending closes
// the connection, then and later; stop undoes that.
func dialHandshake(ctx context.Context, endpoint, self string, o *Options) (c *conn, stop func() bool, err error) {
	network, address, err := splitEndpoint(endpoint, false)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	dctx, cancel := context.WithDeadline(ctx, start.Add(o.HandshakeTimeout))
	nc, err := o.Dial(dctx, network, address)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
		}
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return nil, nil, fmt.Errorf("%w: connect: %w", ErrHandshakeTimeout, err)
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrDial, err)
	}
	c = newConn(nc, o, nil)
	stop = context.AfterFunc(ctx, c.shut)
	if err := c.handshake(self, start); err != nil {
		stop()
		c.shut()
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
		}
		return nil, nil, err
	}
	return c, stop, nil
}
