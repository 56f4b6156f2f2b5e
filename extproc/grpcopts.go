package extproc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// recvHeadroom is added to the body and header limits for the rest of a
// ProcessingRequest (attributes, metadata, framing).
const recvHeadroom = 256 << 10

// ServerOptions returns the options of the ext_proc gRPC server for cfg:
//
//   - a receive limit that fits a body message of MaxBodyBytes plus the
//     headers and headroom; gRPC ends a stream whose message is larger with
//     ResourceExhausted, which Envoy answers with its status_on_error (a
//     body within the limit but over MaxBodyBytes is answered 413);
//   - a lower limit for every message without a body, MaxHeaderBytes plus
//     headroom, and at most 4 × MaxHeaderCount header entries, both checked
//     on the wire before the message is decoded (the stream ends with a
//     gRPC error); within them, more than MaxHeaderCount entries or
//     MaxHeaderBytes bytes are answered 431;
//   - keepalive: the server pings idle connections every KeepaliveTime and
//     drops them after KeepaliveTimeout without an ack, and it tolerates
//     client pings every MinPingInterval, also on connections without
//     streams (Envoy keeps its ext_proc connections open between requests);
//   - a per-stream context the server can cancel, which bounds the wait
//     for a stream's first message without a goroutine per stream;
//   - TLS from GRPC.TLSCert/TLSKey, and mutual TLS requiring a client
//     certificate signed by GRPC.ClientCA.
func ServerOptions(cfg Config) ([]grpc.ServerOption, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	g := cfg.GRPC
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxBodyBytes + cfg.MaxHeaderBytes + recvHeadroom),
		grpc.ForceServerCodecV2(newLimitedCodec(recvLimits{
			headerMsgBytes: cfg.MaxHeaderBytes + recvHeadroom,
			headerEntries:  headerCountHardFactor * cfg.MaxHeaderCount,
		})),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: g.KeepaliveTime, Timeout: g.KeepaliveTimeout}),
		tapOption(),
	}
	if g.TLSCert == "" {
		return opts, nil
	}
	tc, err := serverTLS(g)
	if err != nil {
		return nil, err
	}
	return append(opts, grpc.Creds(credentials.NewTLS(tc))), nil
}

func serverTLS(g GRPCConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(g.TLSCert, g.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("extproc: grpc tls: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if g.ClientCA != "" {
		pem, err := os.ReadFile(g.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("extproc: grpc client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("extproc: grpc client ca: " + g.ClientCA + " holds no PEM certificate")
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
