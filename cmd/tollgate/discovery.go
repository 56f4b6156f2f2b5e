package main

import (
	"context"
	"flag"
	"log/slog"
	"sync"

	"github.com/tollgate/tollgate/extproc"
)

// discoveryOptions holds the worker discovery and leader election flags.
type discoveryOptions struct{}

// registerDiscoveryFlags registers the discovery flags on fs.
func registerDiscoveryFlags(fs *flag.FlagSet, d *discoveryOptions) {}

// validate reports every problem with the discovery flags.
func (d *discoveryOptions) validate(o *options) error { return nil }

// startDiscovery starts the configured worker source, feeding srv.SetWorkers,
// and leader election; goroutines are added to wg and end with ctx.
func startDiscovery(ctx context.Context, o *options, srv *extproc.Server, log *slog.Logger, wg *sync.WaitGroup) error {
	return nil
}
