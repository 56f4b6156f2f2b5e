// Package mockworker is a simulated vLLM engine behind an OpenAI-compatible
// HTTP API, for tollgate's tests and demo. It serves POST /v1/completions
// and /v1/chat/completions (streamed as server-sent events or as one JSON
// answer), GET /v1/models, /health, and a vLLM-style /metrics.
//
// # Engine model
//
// A worker runs at most Config.MaxNumSeqs sequences at once; later requests
// wait in one FIFO queue, and a finishing sequence hands its slot straight
// to the oldest waiter. A running sequence first passes the optional Hold
// hook (see Gate), then prefills the prompt tokens the prefix cache does not
// hold, taking uncached / (PrefillTokensPerSec × Speed); the end of prefill
// produces the first output token. Each further token follows the first at
// i / (DecodeTokensPerSec × Speed), scheduled from the first token's time so
// that timer lateness does not accumulate. By default prefill and decode
// times of one sequence do not depend on the others: the model has slots,
// not a shared batch (Config.Batch changes that, see below). Every request
// produces exactly max_tokens tokens (default Config.DefaultMaxTokens) of
// filler words (FillerToken) and finishes with reason "length".
//
// # Shared batch
//
// With Config.Batch the engine runs as vLLM's does with chunked prefill:
// in steps of one batch that every running sequence past Hold shares.
// Each step carries one decode token of every sequence past its prefill,
// then prefill chunks of the sequences still prefilling, oldest first (in
// the order they joined the batch), while the step's token budget
// (BatchConfig.MaxNumBatchedTokens, which must be at least MaxNumSeqs, as
// vLLM requires) lasts; a prefill that finds no budget left waits for a
// later step. A step of n tokens lasts (BatchConfig.StepOverhead + n /
// BatchConfig.TokensPerSec) / Speed, and the next one starts when it was
// due to end, so that timer lateness does not accumulate (a step late by
// more than its length moves the schedule on instead). A sequence
// produces its first token at the end of the step that carries its last
// prefill chunk, and one token at the end of each later step; a prefill of
// P computed tokens with b tokens of budget left beside the decode tokens
// thus takes ceil(P/b) steps, and a long prefill stretches the token gaps
// of every sequence decoding beside it. Only computed tokens go into a
// step: cached prefix blocks and transferred KV (RemotePrefill) do not. A
// sequence that joins during a step waits for the next one; one cancelled
// during a step leaves its share of that step wasted and is gone from the
// next, its prefill unfinished and uncached. Slots, the FIFO queue, Hold,
// the prefix cache, KV events, records, Stats and /metrics behave as in the
// per-sequence mode; Stats.Steps counts the steps. The batch is driven by a
// step loop, a goroutine that runs while the batch holds a sequence.
//
// # Tokens and the prefix cache
//
// A prompt given as token ids is used as is. Text is tokenized by Tokenize,
// a deterministic stand-in for a tokenizer: one token per 4 bytes. Chat
// messages are first rendered by RenderChat. The prefix cache holds chained
// hashes of full BlockSize-token blocks, at most CacheBlocks of them, with
// least-recently-used eviction. As in vLLM, a prompt's blocks enter the cache
// when its prefill ends, and the last prompt token is always computed, so a
// lookup considers only the full blocks within the first len-1 tokens. The
// hit length is reported as usage.prompt_tokens_details.cached_tokens and
// removed from the prefill work.
//
// # Prefill/decode disaggregation
//
// The worker follows llm-d's contract with vLLM's NIXL connector. Its
// engine honours kv_transfer_params in every Config.Role, as vLLM with
// kv_role kv_both does. A request with do_remote_decode true is the
// prefill half: it runs as any other (its prefill takes the usual time,
// and its blocks enter the prefix cache and the KV events) and its
// non-streamed answer carries kv_transfer_params naming this worker as the
// KV's source: do_remote_prefill true, do_remote_decode false,
// remote_engine_id (the worker's ID), remote_request_id, remote_block_ids
// (the prompt's block indexes: the mock has no physical blocks),
// remote_host and remote_port (the worker's address, or the request's Host
// where the handler is mounted elsewhere) and tp_size 1. A request with
// do_remote_prefill true is the decode half: the transfer brings every
// prompt token that the prefix cache lacks but the last, which alone is
// computed, and the prompt's blocks then enter this worker's cache (and KV
// events) too. usage.cached_tokens counts the transferred tokens, as
// vLLM's does.
//
// Workers of RoleDecode and RoleBoth run llm-d's decode sidecar in front of
// the engine. A request with x-prefiller-host-port (HeaderPrefillerHostPort)
// is first sent to that prefill worker, over Config.Dial and within
// Config.PrefillTimeout, to the same path with the same headers (less
// x-prefiller-host-port, plus the request's x-request-id) and the same body
// with max_tokens 1 (and max_completion_tokens 1 if set), stream false, no
// stream_options, and kv_transfer_params {"do_remote_decode": true,
// "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids":
// null, "remote_host": null, "remote_port": null}. The original request
// then runs on the engine with the kv_transfer_params of the prefill answer
// (an answer without them leaves the prompt to be computed here, as behind
// llm-d's sidecar). A header value that is not one IP:port literal gets 502
// with code CodeInvalidEPPMetadata, as Dynamo's sidecar answers; a prefill
// call that cannot connect, times out or is answered with an error status
// gets 502 with code CodePrefillFailed; both in the OpenAI error shape, and
// neither reaches the engine. An absent or empty header leaves the request
// to the engine alone. RolePrefill runs no sidecar and ignores the header.
//
// # KV events
//
// With Config.KVEvents the worker publishes its prefix cache's changes in
// vLLM's KV-event format: a ZMQ PUB socket sending [topic, 8-byte big-endian
// sequence, msgpack batch], the sequence from 0 and +1 per batch; a
// BlockStored per run of newly cached blocks (its token ids, the parent's
// hash), a BlockRemoved for evictions; batches and events as positional
// arrays or "type"-tagged maps, hashes as integers or digest bytes; an
// optional ROUTER replay socket answering [empty, start sequence] with the
// buffered batches and an end marker; a DP rank offsetting both ports.
// RestartEngine empties the cache and restarts the sequence with an
// AllBlocksCleared batch; DropKVBatches loses batches (they stay in the
// replay buffer) to make a subscriber see a gap.
//
// # Observability
//
// Stats counts requests received, started, finished and cancelled, the
// current and peak running count, token totals (transferred ones apart),
// the sidecar's prefill calls and their failures, the prefill halves
// served and the shared batch's steps; Await waits for a condition on them
// without polling. Records keeps, per request, its ID (x-request-id, or a generated one), the
// headers it arrived with, its kv_transfer_params role, the prefill worker
// the sidecar called and the engine its KV came from, its arrival,
// admission, first-token and finish times, and its token counts. A prefill
// call carries the decode request's ID, so both workers record it under
// the same ID. /metrics exposes vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:prompt_tokens_total (every prompt token,
// prefill halves and decode halves included),
// vllm:prompt_tokens_by_source_total (source local_compute,
// local_cache_hit or external_kv_transfer), vllm:generation_tokens_total,
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (in
// tokens), vllm:kv_cache_usage_perc, vllm:request_success_total and latency
// histograms, from a registry of the worker's own.
//
// # Concurrency and lifecycle
//
// Every request runs on its HTTP handler's goroutine; the worker starts no
// other goroutine except the server goroutine of Listen, those of the
// sidecar's HTTP client connections, which Close closes, and with
// Config.Batch the step loop, which returns at the end of the first step
// that leaves the batch empty (so in a testing/synctest bubble a cancelled
// sequence leaves it running until its step's time has passed). A worker
// served on an in-memory network (Serve) in a testing/synctest bubble needs
// that network's Dial as Config.Dial for its sidecar to reach prefill
// workers. One mutex guards the engine's slots, queue, shared batch, cache,
// counters and records. A request ends early, freeing its slot or leaving
// the queue at once, when its client goes away (the request context ends)
// or when the worker closes. Close cancels every request, stops the
// listener and waits for everything the worker started, the step loop
// included (at most one step). Hold runs on the request's goroutine while
// the request occupies a slot, and Speed does not shorten it.
//
// The command in cmd/mockworker runs one worker:
//
//	go run ./test/mockworker/cmd/mockworker --addr 127.0.0.1:8000 --speed 10
//	go run ./test/mockworker/cmd/mockworker --addr 127.0.0.1:8001 --role decode
//	go run ./test/mockworker/cmd/mockworker --addr 127.0.0.1:8002 --batch --max-num-batched-tokens 2048
package mockworker
