package envoysim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("envoysim: sim is closed")

// ErrDisconnected is returned by Do when the downstream client went away
// (its context ended or Request.DisconnectAt asked for it) before the
// response was complete. No response reaches such a client.
var ErrDisconnected = errors.New("envoysim: downstream client disconnected")

// Sim is a simulated Envoy: an HTTP connection manager with the ext_proc
// filter in front of a router and an ORIGINAL_DST cluster. It is safe for
// concurrent use; every request gets its own side stream, multiplexed over
// one gRPC connection as Envoy does over HTTP/2.
type Sim struct {
	cfg       *settings
	conn      *grpc.ClientConn
	client    extprocv3.ExternalProcessorClient
	transport *http.Transport
	stats     counters

	// life ends at Close; side streams and upstream calls live under it.
	life context.Context
	stop context.CancelFunc

	// mu guards closed and the Add side of wg, so that Close can wait for
	// every request and background stream close.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New validates cfg and returns a Sim. The gRPC connection is made lazily,
// on the first request, like Envoy's cluster connection.
func New(cfg Config) (*Sim, error) {
	st, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(st.maxRecvMsg)),
	}, st.dialOptions...)
	conn, err := grpc.NewClient(st.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("envoysim: ext_proc client for %q: %w", st.addr, err)
	}
	life, stop := context.WithCancel(context.Background())
	return &Sim{
		cfg:       st,
		conn:      conn,
		client:    extprocv3.NewExternalProcessorClient(conn),
		transport: newTransport(st.connectTimeout, st.upstreamDialer),
		life:      life,
		stop:      stop,
	}, nil
}

// newTransport returns the upstream HTTP/1.1 transport: no proxy, no
// compression, pools sized for many concurrent requests per worker. dial,
// when set, replaces the TCP dialer; its connections are not reused. The
// in-memory connections tests dial (grpc's bufconn, through test/memnet)
// apply a past read deadline from a timer goroutine, which can fire after
// the deadline was cleared again; net/http's server sets and clears one
// around every request on a kept-alive connection to stop its background
// read, so the stale timeout then ends the next request's read and the
// server cancels that request as if its client had gone.
func newTransport(connectTimeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	reuse := dial == nil
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	return &http.Transport{
		DisableKeepAlives: !reuse,
		Proxy:             nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			return dial(ctx, network, addr)
		},
		DisableCompression:  true,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
}

// Stats returns a snapshot of the counters.
func (s *Sim) Stats() Stats { return s.stats.snapshot() }

// Close ends every side stream and upstream call, waits for in-flight
// requests and background closes, and releases the connections. Requests in
// flight end with an error reply or ErrDisconnected.
func (s *Sim) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
	s.transport.CloseIdleConnections()
	return s.conn.Close()
}

// acquire registers work that Close must wait for; it fails after Close.
func (s *Sim) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Sim) release() { s.wg.Done() }

// Do sends one request through the simulated Envoy and returns what the
// downstream client sees. An error reply, a local reply and a reset are
// responses, not errors; Do fails only for an invalid Request, after Close,
// and with ErrDisconnected when the client went away.
func (s *Sim) Do(ctx context.Context, req Request) (*Response, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if !s.acquire() {
		return nil, ErrClosed
	}
	defer s.release()
	c := &collector{}
	x := s.newExchange(ctx, &req, c)
	x.run()
	if x.res.disconnected != nil {
		return nil, fmt.Errorf("%w: %w", ErrDisconnected, x.res.disconnected)
	}
	return x.response(c), nil
}
