package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const usageText = `tollgate is an Envoy ext_proc server that admits LLM inference requests
through Dynamo policy-class queues and SMG priority admission, then routes
each to a worker with the x-gateway-destination-endpoint header.

Usage:
  tollgate serve [flags]         serve ext_proc
  tollgate check-config [flags]  validate every file and flag, print all problems
  tollgate tokenize [flags]      print the prompt tokens of one request body (stdin)
  tollgate version               print the version, commit and Go version (also --version)
  tollgate help [command]        print this text, or a command's flags (also --help)

Run 'tollgate serve --help' for the serving flags, grouped by area.
`

// run is main without the process: it parses args, runs one subcommand and
// returns the exit code. Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, usageText)
		return 2
	}
	cmd, args := args[0], args[1:]
	switch {
	case isVersionFlag(cmd):
		cmd = "version"
	case isHelpFlag(cmd):
		cmd = "help"
	case strings.HasPrefix(cmd, "-"):
		fmt.Fprintf(stderr, "tollgate: no command before the flag %s; to serve, run: tollgate serve [flags]\n"+
			"Run 'tollgate help' for the commands.\n", cmd)
		return 2
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
		if len(args) > 0 && args[0] != "help" && !isHelpFlag(args[0]) {
			return run(ctx, []string{args[0], "--help"}, stdout, stderr) // tollgate help serve
		}
		_, _ = io.WriteString(stdout, usageText)
		return 0
	case "demo":
		fmt.Fprintln(stderr, "tollgate: the demo is its own program, not part of the shipped binary: run make demo, or go run ./test/demo/cmd/tollgate-demo")
		return 2
	default:
		fmt.Fprintf(stderr, "tollgate: unknown command %q\nRun 'tollgate help' for the commands.\n", cmd)
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

// isHelpFlag reports whether arg asks for help in flag form.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

// stdin is what tokenize reads; tests replace it.
var stdin io.Reader = os.Stdin
