package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagGroup is one area of the serving flags in `tollgate serve --help`.
type flagGroup struct {
	title string
	flags []string // in the order they are listed
}

// flagGroups sorts every serving flag into one area. A test checks that
// each flag newFlagSet registers is listed here exactly once; a flag
// missing here is still printed, under "Other flags".
var flagGroups = []flagGroup{
	{"General (workers, listeners, logging, shutdown, memory)", []string{
		"workers", "grpc-addr", "metrics-addr", "log-level", "drain-delay", "shutdown-timeout", "gc-heap-floor-bytes",
	}},
	{"Dynamo router policy (policy-class queues, worker selection)", []string{
		"router-policy-config", "router-queue-threshold", "router-queue-policy", "class-limit-status",
		"router-temperature", "router-prefill-load-scale", "router-kv-overlap-score-credit", "seed",
		"fallback-endpoints", "model-rewrite", "pd-uncached-threshold",
	}},
	{"SMG priority scheduler", []string{
		"priority-scheduler-enabled", "priority-scheduler-config", "priority-scheduler-default-max-class",
		"priority-scheduler-tenant-metric-top-n", "objective-class",
	}},
	{"SMG rate limits (request bucket, legacy admission, tenant budgets)", []string{
		"max-concurrent-requests", "rate-limit-tokens-per-second", "queue-size", "queue-timeout-secs",
		"tenant-rate-limit-enabled", "tenant-rate-limit-config",
	}},
	{"Tenancy (API keys, tenant identity)", []string{
		"api-key", "tenant-api-key", "tenant-api-keys-file", "trust-tenant-header", "tenant-header-name",
		"client-ip-source", "forwarded-for-trusted-hops",
	}},
	{"Fairness inside a policy class", []string{
		"fairness", "fairness-weight", "fairness-max-flows",
	}},
	{"Prompt tokens", []string{
		"tokenizer", "model-tokenizer", "tokenizer-cache-bytes",
	}},
	{"Prefix cache and KV events", []string{
		"block-size", "router-ttl-secs", "kv-events", "kv-events-bind", "kv-events-port",
		"kv-events-replay-port", "kv-events-resync-secs", "kv-events-max-blocks", "kv-events-speculative-ttl",
	}},
	{"Engine metrics", []string{
		"engine-metrics-interval", "engine-metrics-timeout", "engine-metrics-max-inflight",
		"engine-metrics-staleness", "engine-saturation", "engine-saturation-waiting", "engine-saturation-kv",
		"engine-warm-start", "engine-capacity",
	}},
	{"Envoy protocol and limits", []string{
		"envoy-message-timeout", "envoy-max-message-timeout", "assume-request-body-mode",
		"assume-response-body-mode", "max-body-bytes", "max-concurrent-streams", "first-message-timeout",
	}},
	{"TLS of the ext_proc listener", []string{
		"grpc-tls-cert", "grpc-tls-key", "grpc-client-ca",
	}},
	{"Worker discovery (Kubernetes, InferencePool)", []string{
		"discovery", "kubeconfig", "k8s-service", "k8s-selector", "k8s-namespace", "k8s-port", "pool",
		"k8s-debounce", "k8s-default-max-running-requests", "k8s-default-max-num-batched-tokens",
		"k8s-default-dp-size", "k8s-model",
	}},
	{"Replicas and leader election", []string{
		"leader-elect", "peer-addr", "leader-elect-backend", "etcd-endpoints", "leader-elect-namespace", "leader-elect-name", "leader-elect-identity",
		"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-retry-period",
	}},
	{"Testing only", []string{
		"test-endpoint-selection",
	}},
}

// printGroupedFlags writes the flags of fs by area, in flagGroups' order,
// each in the flag package's format; flags in no group come last.
func printGroupedFlags(w io.Writer, fs *flag.FlagSet) {
	listed := map[string]bool{}
	section := func(title string, names []string) {
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, name := range names {
			if f := fs.Lookup(name); f != nil {
				printFlag(w, f)
			}
		}
	}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			listed[name] = true
		}
		section(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	if len(rest) > 0 {
		section("Other flags", rest)
	}
}

// printFlag writes one flag as FlagSet.PrintDefaults does, through a
// FlagSet of that flag alone, so the format and the default shown stay the
// flag package's.
func printFlag(w io.Writer, f *flag.Flag) {
	one := flag.NewFlagSet("", flag.ContinueOnError)
	one.SetOutput(w)
	one.Var(f.Value, f.Name, f.Usage)
	one.Lookup(f.Name).DefValue = f.DefValue // Var took the current value
	one.PrintDefaults()
}

// errUsage marks a command-line error already reported on stderr.
var errUsage = errors.New("usage error")

// parseFlags parses args into fs, the flag set of command cmd. --help
// (-h, -help) prints fs.Usage on stdout and returns flag.ErrHelp. A bad
// flag or a stray argument prints the error and a one-line hint on stderr,
// the error last but for the hint, and returns errUsage.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, stdout, stderr io.Writer) error {
	help := fs.Usage
	// The flag package prints the error and then calls Usage on every
	// failure; both go nowhere here and parseFlags reports the error.
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = help
	fs.SetOutput(stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return usageError(stderr, cmd, err.Error()+didYouMean(fs, err))
	case fs.NArg() > 0:
		return usageError(stderr, cmd, fmt.Sprintf("unexpected arguments %q: every setting is a flag", fs.Args()))
	}
	return nil
}

// usageError prints msg and where to find the flags of cmd, and returns
// errUsage.
func usageError(stderr io.Writer, cmd, msg string) error {
	fmt.Fprintf(stderr, "tollgate %s: %s\nRun 'tollgate %s --help' for the flags.\n", cmd, msg, cmd)
	return errUsage
}

// didYouMean returns " (did you mean --NAME?)" when err is the flag
// package's undefined-flag error and fs has a flag within two edits of the
// one given, else "".
func didYouMean(fs *flag.FlagSet, err error) string {
	given, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	best, bestDist := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(given, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return " (did you mean --" + best + "?)"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
