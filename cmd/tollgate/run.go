package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usageText = `tollgate is an Envoy ext_proc server that admits LLM inference requests
through Dynamo policy-class queues and SMG priority admission, then routes
each to a worker with the x-gateway-destination-endpoint header.

Usage:
  tollgate [serve] [flags]      serve ext_proc (the default)
  tollgate check-config [flags] validate every file and flag, print all problems
  tollgate tokenize [flags]     print the prompt tokens of one request body (stdin)
  tollgate version              print the version, commit and Go version (also --version)
  tollgate help                 print this text

Run "tollgate serve --help" for the serving flags.
`

// run is main without the process: it parses args, runs one subcommand and
// returns the exit code. Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isVersionFlag(args[0]) {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, args, stdout, stderr)
	case "check-config":
		err = runCheckConfig(args, stdout, stderr)
	case "tokenize":
		err = runTokenize(ctx, args, stdin, stdout, stderr)
	case "version":
		err = runVersion(args, stdout, stderr)
	case "help":
		_, _ = io.WriteString(stdout, usageText)
		return 0
	case "demo":
		fmt.Fprintln(stderr, "tollgate: the demo is its own program, not part of the shipped binary: run make demo, or go run ./test/demo/cmd/tollgate-demo")
		return 2
	default:
		fmt.Fprintf(stderr, "tollgate: unknown command %q\n\n%s", cmd, usageText)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "tollgate %s: %v\n", cmd, err)
		return 1
	}
}

// stdin is what tokenize reads; tests replace it.
var stdin io.Reader = os.Stdin

// errUsage marks an error already reported by the flag package.
var errUsage = errors.New("usage error")

// parseFlags parses args into fs, mapping the flag package's errors to
// errUsage (it has printed them) or flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
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
