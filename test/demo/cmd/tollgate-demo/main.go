// Command tollgate-demo is the self-contained demonstration `make demo`
// runs: the real tollgate server and scheduler behind a simulated Envoy, in
// front of simulated vLLM workers, all on loopback (package test/demo). It
// is a test harness, kept out of the tollgate binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tollgate/tollgate/test/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it parses the demo flags and runs the
// demonstration, or with --serve keeps the demo stack up until ctx ends. It
// returns the exit code: 0, 1 for a failed run, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := demo.Options{Stdout: stdout, Stderr: stderr, Terminal: isTerminal(stdout)}
	fs := flag.NewFlagSet("tollgate-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Out, "out", demo.DefaultOut, "directory the SVG charts are written to")
	fs.StringVar(&o.Serve, "serve", "", "keep the stack up with the simulated Envoy's HTTP front on this address (e.g. 127.0.0.1:8080) instead of running the scenarios")
	fs.Float64Var(&o.Speed, "speed", 1, "multiplier of the simulated workers' prefill and decode rates")
	fs.StringVar(&o.Scenario, "scenario", demo.ScenarioAll, "scenario to run: all, "+strings.Join(demo.Scenarios, ", "))
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the scheduler's tie-breaker and the simulated users' think times")
	fs.StringVar(&o.Examples, "examples", "", "directory holding equal_share.yaml, premium_4x.yaml and priority.yaml (default: the copies of examples/ built into this program)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return 2
	}
	var err error
	if o.Serve != "" {
		err = demo.Serve(ctx, o)
	} else {
		err = demo.Run(ctx, o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tollgate-demo: %v\n", err)
		return 1
	}
	return 0
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
