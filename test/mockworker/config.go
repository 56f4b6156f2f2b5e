package mockworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"
)

// Defaults applied by Config.withDefaults to zero-valued fields.
const (
	DefaultID                  = "mock-0"
	DefaultModel               = "mock-model"
	DefaultMaxNumSeqs          = 256
	DefaultPrefillTokensPerSec = 8000
	DefaultDecodeTokensPerSec  = 50
	DefaultBlockSize           = 16
	DefaultCacheBlocks         = 8192
	DefaultSpeed               = 1
	DefaultMaxTokens           = 16
	DefaultMaxModelLen         = 32768
	DefaultMaxRecords          = 10000
	DefaultMaxBodyBytes        = 32 << 20
	DefaultPrefillTimeout      = 60 * time.Second
	// DefaultMaxNumBatchedTokens is BatchConfig.MaxNumBatchedTokens's
	// default where Config.MaxNumSeqs is not larger.
	DefaultMaxNumBatchedTokens = 2048
)

// Role is a worker's part in prefill/decode disaggregation, as llm-d's
// llm-d.ai/role pod label names it.
type Role string

// The roles. Only the decode sidecar depends on the role: every role's
// engine honours kv_transfer_params, as vLLM does with kv_role kv_both.
const (
	// RoleBoth serves whole requests and runs the decode sidecar.
	RoleBoth Role = "both"
	// RolePrefill runs no sidecar: x-prefiller-host-port is ignored, as on
	// an llm-d prefill pod.
	RolePrefill Role = "prefill"
	// RoleDecode runs the decode sidecar.
	RoleDecode Role = "decode"
)

// sidecar reports whether the role runs the decode sidecar.
func (r Role) sidecar() bool { return r != RolePrefill }

// Config describes one simulated engine. Every field is optional: the zero
// value of a field selects its documented default, so Config{} is a valid
// configuration. Negative values, NaN and infinities are rejected by Validate.
type Config struct {
	// ID names the worker in logs and in generated request ids.
	// Default DefaultID.
	ID string
	// Model is the one model the worker serves; requests for another model
	// get 404. Default DefaultModel.
	Model string
	// MaxNumSeqs is the number of sequences that run at once (vLLM's
	// --max-num-seqs). Further requests wait in a FIFO queue.
	// Default DefaultMaxNumSeqs.
	MaxNumSeqs int
	// PrefillTokensPerSec is the prefill rate of one sequence: a sequence
	// spends (prompt tokens - cached tokens) / rate before its first token.
	// Default DefaultPrefillTokensPerSec.
	PrefillTokensPerSec float64
	// DecodeTokensPerSec is the decode rate of one sequence: after the first
	// token, each further token takes 1/rate. Default DefaultDecodeTokensPerSec.
	DecodeTokensPerSec float64
	// BlockSize is the number of prompt tokens per prefix-cache block (vLLM's
	// --block-size). Default DefaultBlockSize.
	BlockSize int
	// CacheBlocks bounds the prefix cache; the least recently used block is
	// evicted beyond it. Default DefaultCacheBlocks.
	CacheBlocks int
	// Speed multiplies both rates (and divides the steps of Batch): Speed
	// 100 runs the engine 100 times faster than configured. It does not
	// shorten Hold. Default 1.
	Speed float64
	// DefaultMaxTokens is the number of output tokens of a request that sets
	// no max_tokens. Default DefaultMaxTokens.
	DefaultMaxTokens int
	// MaxModelLen bounds prompt tokens plus max_tokens; a longer request gets
	// 400, as vLLM answers. Default DefaultMaxModelLen.
	MaxModelLen int
	// MaxRecords bounds the per-request records kept for Records; the oldest
	// are dropped beyond it. Default DefaultMaxRecords.
	MaxRecords int
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Hold, when set, is called once per sequence after it has taken a
	// running slot and before its prefill, so it runs on the request's
	// goroutine and the sequence occupies its slot while held. The sequence
	// waits until Hold returns; a non-nil error (normally ctx.Err()) cancels
	// it. ctx ends when the client goes away or the worker closes. Gate.Wait
	// has this signature. Optional.
	Hold func(ctx context.Context, req RequestInfo) error
	// Logger receives the worker's logs. Default: logs are discarded.
	Logger *slog.Logger
	// MetricsNaming selects the load gauges' names on /metrics: "vllm"
	// (the default: vllm:num_requests_waiting, vllm:num_requests_running,
	// vllm:kv_cache_usage_perc, vllm:cache_config_info) or "sglang"
	// (sglang:num_queue_reqs, sglang:num_running_reqs, sglang:token_usage,
	// sglang:cache_config_info, sglang:max_running_requests).
	MetricsNaming string
	// DPRank is the data-parallel rank the worker's series are labelled
	// with (vLLM's engine label, SGLang's dp_rank); several workers with
	// consecutive ranks behind one metrics endpoint simulate a DP engine
	// (see MetricsHandler).
	DPRank int
	// KVEvents, when set, publishes the prefix cache's changes as vLLM KV
	// events. Optional.
	KVEvents *KVEventsConfig
	// Role is the worker's part in prefill/decode disaggregation: RoleBoth,
	// RolePrefill or RoleDecode. Default RoleBoth.
	Role Role
	// PrefillTimeout bounds the decode sidecar's call to a prefill worker.
	// It is wall-clock time: Speed does not shorten it.
	// Default DefaultPrefillTimeout.
	PrefillTimeout time.Duration
	// Dial opens the decode sidecar's connections to prefill workers. A
	// worker served on an in-memory network needs that network's Dial
	// (memnet.Network.Dial). Default: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Batch, when set, switches the engine from per-sequence timing to
	// vLLM-style steps of one shared batch, where a long prefill slows the
	// tokens of every sequence decoding beside it (see BatchConfig and the
	// package documentation). PrefillTokensPerSec and DecodeTokensPerSec
	// then only supply BatchConfig's defaults. Default: nil, every sequence
	// timed on its own.
	Batch *BatchConfig
}

// BatchConfig describes the shared batch of an engine that runs in steps,
// as vLLM's scheduler with chunked prefill does. Each step carries one
// decode token of every running sequence past its prefill, then chunks of
// the unfinished prefills, oldest first, up to MaxNumBatchedTokens tokens
// in all; it lasts (StepOverhead + tokens / TokensPerSec) / Config.Speed.
// Every field is optional: zero selects the default.
type BatchConfig struct {
	// MaxNumBatchedTokens is the token budget of one step (vLLM's
	// --max-num-batched-tokens). It must be at least Config.MaxNumSeqs, as
	// vLLM requires, so that every running sequence's decode token fits.
	// Default DefaultMaxNumBatchedTokens, or Config.MaxNumSeqs if larger.
	MaxNumBatchedTokens int
	// StepOverhead is the fixed part of a step's duration at speed 1: the
	// time of a step that carries (nearly) nothing, such as a small decode
	// batch. Default 1 / Config.DecodeTokensPerSec, so that a sequence
	// decoding alone produces about DecodeTokensPerSec tokens per second.
	StepOverhead time.Duration
	// TokensPerSec is the rate at which a step's tokens (decode tokens and
	// prefill chunks alike) add to its duration at speed 1. Default
	// Config.PrefillTokensPerSec, so that a long prompt alone prefills at
	// about that rate.
	TokensPerSec float64
}

// Validate reports every invalid field, joined, or nil if cfg is usable.
// Zero values are valid; they select the defaults.
func (c Config) Validate() error {
	var errs []error
	nonNegInt := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("mockworker: %s must not be negative, got %d", name, v))
		}
	}
	nonNegFloat := func(name string, v float64) {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("mockworker: %s must be a finite non-negative number, got %v", name, v))
		}
	}
	nonNegInt("max num seqs", c.MaxNumSeqs)
	nonNegFloat("prefill tokens per second", c.PrefillTokensPerSec)
	nonNegFloat("decode tokens per second", c.DecodeTokensPerSec)
	nonNegInt("block size", c.BlockSize)
	nonNegInt("cache blocks", c.CacheBlocks)
	nonNegFloat("speed", c.Speed)
	nonNegInt("default max tokens", c.DefaultMaxTokens)
	nonNegInt("max model len", c.MaxModelLen)
	nonNegInt("max records", c.MaxRecords)
	nonNegInt("max body bytes", c.MaxBodyBytes)
	nonNegInt("dp rank", c.DPRank)
	if c.MetricsNaming != "" && c.MetricsNaming != "vllm" && c.MetricsNaming != "sglang" {
		errs = append(errs, fmt.Errorf("mockworker: metrics naming must be vllm or sglang, got %q", c.MetricsNaming))
	}
	switch c.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
	default:
		errs = append(errs, fmt.Errorf("mockworker: role must be both, prefill or decode, got %q", c.Role))
	}
	if c.PrefillTimeout < 0 {
		errs = append(errs, fmt.Errorf("mockworker: prefill timeout must not be negative, got %v", c.PrefillTimeout))
	}
	if b := c.Batch; b != nil {
		nonNegInt("max num batched tokens", b.MaxNumBatchedTokens)
		nonNegFloat("batch tokens per second", b.TokensPerSec)
		if b.StepOverhead < 0 {
			errs = append(errs, fmt.Errorf("mockworker: batch step overhead must not be negative, got %v", b.StepOverhead))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d := c.withDefaults()
	if d.DefaultMaxTokens > d.MaxModelLen {
		return fmt.Errorf("mockworker: default max tokens %d exceeds max model len %d", d.DefaultMaxTokens, d.MaxModelLen)
	}
	if d.Batch != nil && d.Batch.MaxNumBatchedTokens < d.MaxNumSeqs {
		return fmt.Errorf("mockworker: max num batched tokens %d is less than max num seqs %d", d.Batch.MaxNumBatchedTokens, d.MaxNumSeqs)
	}
	return nil
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	setStr := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setFloat := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setStr(&c.ID, DefaultID)
	setStr(&c.Model, DefaultModel)
	setStr(&c.MetricsNaming, "vllm")
	if c.Role == "" {
		c.Role = RoleBoth
	}
	if c.PrefillTimeout == 0 {
		c.PrefillTimeout = DefaultPrefillTimeout
	}
	setInt(&c.MaxNumSeqs, DefaultMaxNumSeqs)
	setFloat(&c.PrefillTokensPerSec, DefaultPrefillTokensPerSec)
	setFloat(&c.DecodeTokensPerSec, DefaultDecodeTokensPerSec)
	setInt(&c.BlockSize, DefaultBlockSize)
	setInt(&c.CacheBlocks, DefaultCacheBlocks)
	setFloat(&c.Speed, DefaultSpeed)
	setInt(&c.DefaultMaxTokens, DefaultMaxTokens)
	setInt(&c.MaxModelLen, DefaultMaxModelLen)
	setInt(&c.MaxRecords, DefaultMaxRecords)
	setInt(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Batch != nil {
		b := *c.Batch // The caller's stays as it was.
		if b.MaxNumBatchedTokens == 0 {
			b.MaxNumBatchedTokens = max(DefaultMaxNumBatchedTokens, c.MaxNumSeqs)
		}
		if b.StepOverhead == 0 {
			b.StepOverhead = rateDuration(1, c.DecodeTokensPerSec)
		}
		setFloat(&b.TokensPerSec, c.PrefillTokensPerSec)
		c.Batch = &b
	}
	return c
}

// prefillTime is how long a sequence prefills n uncached tokens.
func (c Config) prefillTime(n int) time.Duration {
	return rateDuration(n, c.PrefillTokensPerSec*c.Speed)
}

// decodeTime is how long a sequence takes to decode n tokens.
func (c Config) decodeTime(n int) time.Duration {
	return rateDuration(n, c.DecodeTokensPerSec*c.Speed)
}

// stepTime is how long a step of the shared batch carrying n tokens takes.
func (c Config) stepTime(n int) time.Duration {
	ns := float64(c.Batch.StepOverhead) + float64(n)/c.Batch.TokensPerSec*float64(time.Second)
	return time.Duration(math.Round(ns / c.Speed))
}

// rateDuration is the time n tokens take at rate tokens per second, rounded
// to the nanosecond.
func rateDuration(n int, rate float64) time.Duration {
	return time.Duration(math.Round(float64(n) / rate * float64(time.Second)))
}
