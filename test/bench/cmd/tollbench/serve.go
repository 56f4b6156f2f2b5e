package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched/policy"
)

// runServe is the profiling harness: extproc.Server configured as
// `tollgate serve --tokenizer=estimate` configures it with default flags
// (plus, optionally, the priority scheduler), with /debug/pprof/ next to
// /metrics. It exists because the tollgate binary has no profiling
// endpoint; profiles taken from it describe the same server code, not the
// tollgate binary itself.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:0", "ext_proc gRPC listen address")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:0", "listen address of /metrics and /debug/pprof/")
	workersFile := fs.String("workers", "", "workers YAML file (required)")
	priorityFile := fs.String("priority-scheduler-config", "", "SMG priority file; enables the priority scheduler")
	messageTimeout := fs.Duration("envoy-message-timeout", extproc.DefaultEnvoyMessageTimeout, "Envoy's ext_proc message_timeout")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *workersFile == "" {
		return errors.New("--workers is required")
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, workers, err := harnessConfig(log, *workersFile, *priorityFile)
	if err != nil {
		return err
	}
	cfg.EnvoyMessageTimeout = *messageTimeout
	srv, err := extproc.New(cfg, workers)
	if err != nil {
		return err
	}
	gopts, err := extproc.ServerOptions(cfg)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(gopts...)
	srv.Register(gs)

	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", *grpcAddr)
	if err != nil {
		return err
	}
	ml, err := lc.Listen(ctx, "tcp", *metricsAddr)
	if err != nil {
		_ = gl.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.MetricsHandler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	errc := make(chan error, 3)
	go func() { errc <- srv.Run(runCtx) }()
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- hs.Serve(ml) }()
	log.Info("serving", "grpc", gl.Addr().String(), "metrics", ml.Addr().String())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	gs.Stop()
	_ = hs.Close()
	stopRun()
	srv.Wait()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("harness server: %w", serveErr)
	}
	return nil
}

// harnessConfig builds the server configuration of `tollgate serve` with
// default flags, --tokenizer=estimate, --drain-delay 0, the given workers
// file and, when priorityFile is set, --priority-scheduler-enabled with it.
func harnessConfig(log *slog.Logger, workersFile, priorityFile string) (extproc.Config, []fleet.Worker, error) {
	workers, err := fleet.LoadWorkersFile(workersFile)
	if err != nil {
		return extproc.Config{}, nil, err
	}
	fallback, err := policy.SyntheticDefault(nil, "fcfs")
	if err != nil {
		return extproc.Config{}, nil, err
	}
	tenants, err := policy.NewTenants(policy.TenantOptions{HeaderName: policy.DefaultTenantHeader})
	if err != nil {
		return extproc.Config{}, nil, err
	}
	cfg := extproc.Config{
		Logger:     log,
		DrainDelay: -1,
		Tenancy:    &intake.Tenancy{Tenants: tenants, DefaultMaxClass: "default"},
	}
	cfg.Sched.Policy.Fallback = fallback
	cfg.Sched.Rand = rand.New(rand.NewPCG(1, 2))
	if priorityFile != "" {
		pf, err := policy.LoadPriorityConfig(priorityFile)
		if err != nil {
			return extproc.Config{}, nil, err
		}
		cfg.Sched.Priority = pf.PriorityConfig()
		cfg.Tenancy.PriorityFile = pf
	}
	return cfg, workers, nil
}
