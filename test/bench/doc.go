// Package bench holds the pieces of tollgate's performance benchmark, which
// `make bench` runs through the tollbench command (test/bench/cmd/tollbench):
//
//   - parsing `go test -bench` output (ParseGoBench) for the scheduler and
//     tokenizer micro-benchmarks;
//   - the end-to-end load generator (RunLoad): a closed loop of simulated
//     Envoy requests (Client, a pool of test/envoysim connections sending
//     2 KiB completion bodies from CompletionBodies) against an ext_proc
//     server in another process, with throughput and latency percentiles;
//   - streamed responses: with ResponseChunks, the load's completions ask
//     the upstream for a server-sent event stream of that many token
//     events, each its own response body chunk (or, with OneWrite, the
//     same events written at once), and LoadResult.MsgsSent counts the
//     ext_proc messages, for the CPU per chunk;
//   - several loads at once (RunLoads), each its own closed loop, their
//     windows started together: replica mode's fronts driven together;
//   - the interleaved driver (RunInterleaved): one closed-loop stream that
//     visits several ext_proc servers in short blocks (InterleaveOrder),
//     each through its own Client, with each server's latency
//     percentiles: the servers measured over the same seconds;
//   - the long-context driver (RunLong): long chat conversations
//     (LongChat: a system prompt of their own, one earlier exchange, a new
//     last turn per pass) sent one at a time to several ext_proc servers
//     in turn, a pass over new conversations then a pass over the same
//     ones, with the decision latency of every request;
//   - the held-request driver (RunHold): parks the worker's running slots,
//     queues N requests behind them in tollgate, measures the server's
//     resident memory per held request, then releases them and times the
//     drain;
//   - the upstream model server both ext_proc servers route to (Upstream):
//     one fixed one-token completion per request, answered at once (or a
//     paced event stream when the request asks for one), with a gate that
//     parks the next N requests on demand;
//   - what the run reads from the servers: /proc figures of a process
//     (ProcRSS, ProcCPU) and the Prometheus text format (ParsePromText);
//   - the report (Report), one Markdown table with a section per phase.
//
// Nothing here is imported by production code, and none of it runs in
// `make test` beyond its own unit tests.
//
// # Invariants
//
//   - A measurement never hides a failure: requests that did not end in
//     HTTP 200 are counted and shown next to the figures they affect.
//   - Latency percentiles use the nearest-rank method over every completed
//     request of the measured window; warm-up requests are discarded.
//
// # Concurrency
//
// Upstream and LongChat are safe for concurrent use. RunLoad, RunLoads
// and RunHold start their own goroutines and wait for all of them before
// returning; RunLong and RunInterleaved send from the calling goroutine. The parsing and
// report functions are pure.
package bench
