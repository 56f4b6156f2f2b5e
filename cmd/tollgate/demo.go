package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/tollgate/tollgate/test/demo"
)

// runDemo parses the demo flags and runs the demonstration, or with
// --serve keeps the demo stack up until ctx ends.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := demo.Options{Stdout: stdout, Stderr: stderr, Terminal: isTerminal(stdout)}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Out, "out", demo.DefaultOut, "directory the SVG charts are written to")
	fs.StringVar(&o.Serve, "serve", "", "keep the stack up with the simulated Envoy's HTTP front on this address (e.g. 127.0.0.1:8080) instead of running the scenarios")
	fs.Float64Var(&o.Speed, "speed", 1, "multiplier of the simulated workers' prefill and decode rates")
	fs.StringVar(&o.Scenario, "scenario", demo.ScenarioAll, "scenario to run: all, "+strings.Join(demo.Scenarios, ", "))
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the scheduler's tie-breaker and the simulated users' think times")
	fs.StringVar(&o.Examples, "examples", "", "directory holding equal_share.yaml, premium_4x.yaml and priority.yaml (default: ./examples or the nearest parent's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Serve != "" {
		return demo.Serve(ctx, o)
	}
	return demo.Run(ctx, o)
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
