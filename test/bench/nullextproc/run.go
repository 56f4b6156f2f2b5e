package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"

	"google.golang.org/grpc"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// errUsage marks an argument error the flag set has already reported.
var errUsage = errors.New("usage")

// run parses args, serves until ctx ends, then stops the server.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("nullextproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("grpc-addr", "127.0.0.1:0", "ext_proc gRPC listen address")
	endpoint := fs.String("endpoint", "", "worker every request is routed to, a literal IP:port (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return errUsage
	}
	if _, err := netip.ParseAddrPort(*endpoint); err != nil {
		return fmt.Errorf("--endpoint %q is not a literal IP:port", *endpoint)
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))

	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, newServer(*endpoint))
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(l) }()
	log.Info("serving", "grpc", l.Addr().String(), "endpoint", *endpoint)

	select {
	case <-ctx.Done():
		gs.Stop()
		if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc server: %w", err)
		}
		return nil
	case err := <-errc:
		return fmt.Errorf("grpc server: %w", err)
	}
}
