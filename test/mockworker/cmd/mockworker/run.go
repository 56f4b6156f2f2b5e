package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/tollgate/tollgate/test/kvwire"
	"github.com/tollgate/tollgate/test/mockworker"
)

// errUsage marks an argument error that the flag set has already reported
// along with the usage text.
var errUsage = errors.New("usage")

// run is main without the process: it parses args, serves until ctx ends,
// and returns instead of exiting. Logs go to stderr.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mockworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      mockworker.Config
		addr     string
		logLevel slog.Level
		kv       mockworker.KVEventsConfig
		kvShape  string
		dpRank   int
		batched  bool
		batch    mockworker.BatchConfig
	)
	fs.StringVar(&addr, "addr", "127.0.0.1:8000", "TCP address to listen on")
	fs.StringVar(&cfg.ID, "id", mockworker.DefaultID, "worker id, used in logs and generated request ids")
	fs.StringVar(&cfg.Model, "model", mockworker.DefaultModel, "the one model served")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", mockworker.DefaultMaxNumSeqs, "sequences running at once; more wait in a FIFO queue")
	fs.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tokens-per-sec", mockworker.DefaultPrefillTokensPerSec, "prefill rate of one sequence, in uncached prompt tokens per second")
	fs.Float64Var(&cfg.DecodeTokensPerSec, "decode-tokens-per-sec", mockworker.DefaultDecodeTokensPerSec, "decode rate of one sequence, in output tokens per second")
	fs.IntVar(&cfg.BlockSize, "block-size", mockworker.DefaultBlockSize, "prompt tokens per prefix-cache block")
	fs.IntVar(&cfg.CacheBlocks, "cache-blocks", mockworker.DefaultCacheBlocks, "prefix-cache capacity in blocks (LRU beyond it)")
	fs.Float64Var(&cfg.Speed, "speed", mockworker.DefaultSpeed, "multiplier of both rates: 10 runs ten times faster")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", mockworker.DefaultMaxTokens, "output tokens of a request without max_tokens")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", mockworker.DefaultMaxModelLen, "limit on prompt plus output tokens")
	fs.IntVar(&cfg.MaxRecords, "max-records", mockworker.DefaultMaxRecords, "per-request records kept in memory")
	fs.IntVar(&cfg.MaxBodyBytes, "max-body-bytes", mockworker.DefaultMaxBodyBytes, "largest request body accepted; larger ones get 413")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&kv.Endpoint, "kv-events-endpoint", "", "publish vLLM KV events on this ZMQ endpoint (tcp://IP:PORT; bound unless --kv-events-connect)")
	fs.StringVar(&kv.ReplayEndpoint, "kv-events-replay-endpoint", "", "bind vLLM's replay ROUTER socket here")
	fs.BoolVar(&kv.Connect, "kv-events-connect", false, "connect the PUB socket to --kv-events-endpoint (a subscriber's bind mode)")
	fs.StringVar(&kv.Topic, "kv-events-topic", "", "topic frame of every message, e.g. kv@<pod>@<model>")
	fs.StringVar(&kvShape, "kv-events-shape", "array", "batch and event shape: array (positional, vLLM before #42892) or map (\"type\"-tagged)")
	fs.BoolVar(&kv.Encoding.ByteHashes, "kv-events-byte-hashes", false, "send block hashes as digest bytes instead of integers")
	fs.IntVar(&dpRank, "dp-rank", -1, "data-parallel rank: sent in every batch, and offsets the KV-event ports by it (-1: none)")
	fs.StringVar((*string)(&cfg.Role), "role", string(mockworker.RoleBoth), "prefill/decode role: both, prefill or decode (prefill ignores x-prefiller-host-port)")
	fs.DurationVar(&cfg.PrefillTimeout, "prefill-timeout", mockworker.DefaultPrefillTimeout, "bound on the decode sidecar's call to a prefill worker")
	fs.BoolVar(&batched, "batch", false, "run the engine in steps of one shared batch, as vLLM does, instead of timing each sequence on its own")
	fs.IntVar(&batch.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "with --batch: tokens one step carries at most (0: 2048, or --max-num-seqs if larger)")
	fs.DurationVar(&batch.StepOverhead, "step-overhead", 0, "with --batch: fixed duration of a step at speed 1 (0: one token at --decode-tokens-per-sec)")
	fs.Float64Var(&batch.TokensPerSec, "step-tokens-per-sec", 0, "with --batch: rate at which a step's tokens add to its duration at speed 1 (0: --prefill-tokens-per-sec)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if batched {
		cfg.Batch = &batch
	} else if batch != (mockworker.BatchConfig{}) {
		return errors.New("--max-num-batched-tokens, --step-overhead and --step-tokens-per-sec need --batch")
	}
	if kv.Endpoint != "" {
		switch kvShape {
		case "array":
			kv.Encoding.Shape = kvwire.ShapeArray
		case "map":
			kv.Encoding.Shape = kvwire.ShapeMap
		default:
			return fmt.Errorf("--kv-events-shape %q: want array or map", kvShape)
		}
		if dpRank >= 0 {
			r := uint32(dpRank)
			kv.DPRank = &r
		}
		cfg.KVEvents = &kv
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	w, err := mockworker.New(cfg)
	if err != nil {
		return err
	}
	if _, err := w.Listen(addr); err != nil {
		return err
	}
	<-ctx.Done()
	cfg.Logger.Info("shutting down")
	return w.Close()
}
