package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

// errUsage marks an argument error the flag set has already reported.
var errUsage = errors.New("usage")

const usageText = `tollbench runs tollgate's performance benchmark.

Usage:
  tollbench [run] [flags]   run every phase and print the table (the default)
  tollbench worker [flags]  serve the benchmark's upstream
  tollbench load [flags]    one end-to-end load measurement, JSON on stdout
  tollbench hold [flags]    one held-request measurement, JSON on stdout
  tollbench longctx [flags] one long-context measurement, JSON on stdout
  tollbench interleave [flags] one stream through several servers in turn, JSON on stdout
  tollbench loads [flags]   several loads at once, JSON on stdout
  tollbench serve [flags]   the profiling harness: extproc.Server with /debug/pprof/
`

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runAll(ctx, args, stdout, stderr)
	case "worker":
		return runWorker(ctx, args, stderr)
	case "load":
		return runLoad(ctx, args, stdout, stderr)
	case "hold":
		return runHold(ctx, args, stdout, stderr)
	case "longctx":
		return runLongCtx(ctx, args, stdout, stderr)
	case "interleave":
		return runInterleave(ctx, args, stdout, stderr)
	case "loads":
		return runLoads(ctx, args, stdout, stderr)
	case "serve":
		return runServe(ctx, args, stderr)
	case "help":
		_, _ = io.WriteString(stdout, usageText)
		return nil
	}
	fmt.Fprintf(stderr, "tollbench: unknown command %q\n\n%s", cmd, usageText)
	return errUsage
}

// parse parses args into fs, which reports its own errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return errUsage
	}
	return nil
}

// runWorker serves a bench.Upstream until ctx ends.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := parse(fs, args); err != nil {
		return err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bench.NewUpstream(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	slog.New(slog.NewJSONHandler(stderr, nil)).Info("serving", "http", l.Addr().String())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return err
	}
}

// runLoad runs one bench.RunLoad and prints its result as JSON.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.LoadConfig
	cfg.Mode = bench.ModeBuffered
	fs.Var(&cfg.Mode, "mode", "processing mode: buffered or duplex")
	fs.StringVar(&cfg.ExtProcAddr, "ext", "", "ext_proc server address (required)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 1, "requests in flight")
	fs.IntVar(&cfg.Conns, "conns", 2, "gRPC connections")
	fs.IntVar(&cfg.BodyBytes, "body-bytes", 2048, "request body size")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "measured window")
	fs.IntVar(&cfg.ResponseChunks, "chunks", 0, "ask the upstream for streamed answers of this many token events (0: one JSON answer)")
	fs.DurationVar(&cfg.ChunkGap, "chunk-gap", 0, "with --chunks, the upstream's pause before each token event")
	fs.BoolVar(&cfg.OneWrite, "one-write", false, "with --chunks, the same pauses but every event written at once after the last")
	fs.BoolVar(&cfg.Shipped, "shipped", false, "the shipped filter's other settings (send_body_without_waiting_for_header_response, request attributes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.ExtProcAddr == "" {
		return errors.New("--ext is required")
	}
	r, err := bench.RunLoad(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}

// runHold runs one bench.RunHold and prints its result as JSON.
func runHold(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.HoldConfig
	fs.StringVar(&cfg.ExtProcAddr, "ext", "", "tollgate's ext_proc address (required)")
	fs.StringVar(&cfg.MetricsURL, "metrics", "", "tollgate's metrics base URL (required)")
	fs.StringVar(&cfg.UpstreamURL, "upstream", "", "the upstream's base URL (required)")
	fs.StringVar(&cfg.PprofURL, "pprof", "", "base URL serving /debug/pprof/ for tollgate's process, if any")
	fs.StringVar(&cfg.HeapProfile, "heap-profile", "", "with --pprof, file for the server's heap profile while the requests are held")
	fs.IntVar(&cfg.PID, "pid", 0, "tollgate's process id (required)")
	fs.IntVar(&cfg.Held, "held", 10000, "requests to hold in tollgate's queue")
	fs.IntVar(&cfg.Running, "running", 64, "requests parked at the worker first (its slots)")
	fs.IntVar(&cfg.Conns, "conns", 8, "gRPC connections")
	fs.DurationVar(&cfg.MessageTimeout, "message-timeout", time.Second, "the filter's message_timeout (match tollgate's --envoy-message-timeout)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.ExtProcAddr == "" || cfg.MetricsURL == "" || cfg.UpstreamURL == "" || cfg.PID <= 0 {
		return errors.New("--ext, --metrics, --upstream and --pid are required")
	}
	r, err := bench.RunHold(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}
