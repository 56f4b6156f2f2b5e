// Package bench holds the pieces of tollgate's performance benchmark, which
// `make bench` runs through the tollbench command (test/bench/cmd/tollbench):
//
//   - parsing `go test -bench` output (ParseGoBench) for the scheduler and
//     tokenizer micro-benchmarks;
//   - the end-to-end load generator (RunLoad): a closed loop of simulated
//     Envoy requests (Client, a pool of test/envoysim connections sending
//     2 KiB completion bodies from CompletionBodies) against an ext_proc
//     server in another process, with throughput and latency percentiles;
//   - the held-request driver (RunHold): parks the worker's running slots,
//     queues N requests behind them in tollgate, measures the server's
//     resident memory per held request, then releases them and times the
//     drain;
//   - the upstream model server both ext_proc servers route to (Upstream):
//     one fixed one-token completion per request, answered at once, with a
//     gate that parks the next N requests on demand;
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
// Upstream is safe for concurrent use. RunLoad and RunHold start their own
// goroutines and wait for all of them before returning. The parsing and
// report functions are pure.
package bench
