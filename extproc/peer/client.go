package peer

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// ClientStream is a front's stream to the scheduler. Send and Recv may be
// called from two goroutines at once; Close from any.
type ClientStream interface {
	// Send sends u. Once the stream has ended it returns io.EOF; Recv
	// returns why.
	Send(u *Up) error
	// Recv returns the next valid message. An invalid one cancels the
	// stream, and Recv returns its Validate error.
	Recv() (*Down, error)
	// Close cancels the stream and closes its connection.
	Close()
}

// Dial connects to the scheduler at addr and opens the stream, with TLS
// from tc, or none when tc is nil. ctx bounds the opening only: the
// stream lives until Close. The connection pings the scheduler every 10s
// (gRPC's floor), also with no stream open, and drops it after 5s without
// an ack. The address is dialled as given (gRPC's passthrough resolver);
// opts are added last (tests dial an in-memory network).
func Dial(ctx context.Context, addr string, tc *tls.Config, opts ...grpc.DialOption) (ClientStream, error) {
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: clientPingInterval, Timeout: pingTimeout, PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}), grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("peer: dial %s: %w", addr, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	s, err := conn.NewStream(sctx, &serviceDesc.Streams[0], connectMethod)
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("peer: connect to %s: %w", addr, err)
	}
	return &clientStream{conn: conn, s: s, cancel: cancel}, nil
}

type clientStream struct {
	conn   *grpc.ClientConn
	s      grpc.ClientStream
	cancel context.CancelFunc
}

func (c *clientStream) Send(u *Up) error { return c.s.SendMsg(u) }

func (c *clientStream) Recv() (*Down, error) {
	d := new(Down)
	if err := c.s.RecvMsg(d); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		c.cancel()
		return nil, err
	}
	return d, nil
}

func (c *clientStream) Close() {
	c.cancel()
	_ = c.conn.Close()
}
