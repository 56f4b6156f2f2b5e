// Command mockworker runs one simulated vLLM engine (package mockworker) on
// an OpenAI-compatible HTTP API until it gets SIGINT or SIGTERM:
//
//	go run ./test/mockworker/cmd/mockworker --addr 127.0.0.1:8000 --speed 10
//	go run ./test/mockworker/cmd/mockworker --addr 127.0.0.1:8001 --batch \
//		--max-num-batched-tokens 2048 --step-overhead 5ms --step-tokens-per-sec 40000
//
// Every field of mockworker.Config has a flag, except the Hold hook and the
// Dial function, which only tests can set. Run it with -h for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "mockworker:", err)
		os.Exit(1)
	}
}
