package peer

import (
	"context"
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// ServiceName is the channel's gRPC service.
const ServiceName = "tollgate.peer.v1.Scheduler"

// connectMethod is the full name of the one method, a bidirectional stream.
const connectMethod = "/" + ServiceName + "/Connect"

// Keepalive: the server pings every pingInterval and drops a connection
// after pingTimeout without an ack. gRPC floors a client's ping interval
// at 10s, so a front pings every clientPingInterval.
const (
	pingInterval       = 5 * time.Second
	pingTimeout        = 5 * time.Second
	clientPingInterval = 10 * time.Second
)

// handler is what the service descriptor dispatches to.
type handler interface {
	connect(grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*handler)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Connect",
		Handler:       func(srv any, s grpc.ServerStream) error { return srv.(handler).connect(s) },
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "extproc/peer",
}

// ServerStream is the scheduler's side of one front's stream.
type ServerStream interface {
	Send(*Down) error
	// Recv returns the next valid message. An invalid one ends the
	// stream: Recv returns, now and after, an InvalidArgument error.
	Recv() (*Up, error)
	// Context is the stream's, done when the stream ends.
	Context() context.Context
}

// Register registers the channel's service on g: serve runs once per
// front's stream, which ends when serve returns (with its error). serve
// must not use the stream after it returns.
func Register(g *grpc.Server, serve func(ServerStream) error) {
	g.RegisterService(&serviceDesc, service(serve))
}

// service serves the Connect streams.
type service func(ServerStream) error

func (f service) connect(gs grpc.ServerStream) error {
	s := &serverStream{s: gs}
	if err := f(s); err != nil {
		return err
	}
	return s.invalid
}

type serverStream struct {
	s grpc.ServerStream
	// invalid is the error of the first invalid message received.
	invalid error
}

func (s *serverStream) Send(d *Down) error { return s.s.SendMsg(d) }

func (s *serverStream) Recv() (*Up, error) {
	if s.invalid != nil {
		return nil, s.invalid
	}
	u := new(Up)
	if err := s.s.RecvMsg(u); err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		s.invalid = status.Error(codes.InvalidArgument, err.Error())
		return nil, s.invalid
	}
	return u, nil
}

func (s *serverStream) Context() context.Context { return s.s.Context() }

// ServerOptions returns the options of the channel's own gRPC server: the
// JSON codec, a receive limit of MaxMessageBytes, keepalive (the server
// pings every 5s and drops a connection after 5s without an ack, and
// tolerates client pings every 5s, also with no stream open), and TLS from
// tc when it is not nil.
func ServerOptions(tc *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{}),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingInterval, Timeout: pingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: pingInterval, PermitWithoutStream: true}),
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return opts
}
