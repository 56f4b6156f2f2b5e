// Command tollbench runs tollgate's performance benchmark and prints one
// table; `make bench` runs it from the repository root:
//
//	go run ./test/bench/cmd/tollbench run [-out bench-out] [-profile]
//
// The run subcommand (the default) goes through six phases, printing
// progress on stderr, and writes the table to stdout and to
// <out>/results.md, with the raw outputs, logs and profiles next to it.
// The table opens with the Targets section: each target the server is held
// to (the end-to-end ratios to the null server, the memory and goroutines
// per held request, the core's allocations), its bound, the figure this
// run measured and "met", "missed" or "not measured". A missed target is
// reported, never an exit status; the run fails only when a phase could
// not measure. The phases:
//
//  1. scheduler micro-benchmarks: `go test -bench` on ./sched (ring
//     push+pop, Submit+dispatch+Release with and without the slot gate,
//     preemption, and the heap bytes of 1,000,000 queued requests);
//  2. end-to-end load: tollgate and the null ext_proc server
//     (test/bench/nullextproc), each built into a temporary directory and
//     run in its own process, in front of one upstream process; a load
//     process per measurement drives simulated Envoy requests in BUFFERED
//     and FULL_DUPLEX_STREAMED mode at several concurrencies, alternating
//     the two servers for several rounds, and the medians are reported;
//  3. held requests: tollgate with the priority scheduler and a worker of
//     64 slots whose requests are parked, so that N more wait in
//     tollgate's queue; its resident memory and goroutines per held
//     request, and the drain time after release, at two sizes;
//  4. tokenizers: `go test -bench` on ./extproc/request/tokenize;
//  5. engine metrics: the scraper's CPU per worker per second at 256
//     workers (`go test -bench` on ./extproc/engine/enginemetrics);
//  6. KV events: decode+index ingest rate (./extproc/engine/kvevents), the exact
//     prefix index's lookup latency and its memory per cached block
//     (./sched/prefix);
//  7. with -profile, CPU and allocation profiles of the extproc server code
//     under the BUFFERED load at the highest concurrency, taken from a
//     harness build of the server (the serve subcommand) since the tollgate
//     binary has no profiling endpoint.
//
// The other subcommands are the processes the run starts: worker (the
// upstream), load (one measurement, JSON on stdout), hold (one held-request
// measurement, JSON on stdout) and serve (the profiling harness).
package main
