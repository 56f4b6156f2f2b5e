// Package demo is the demonstration `make demo` runs (command
// test/demo/cmd/tollgate-demo): a self-contained demonstration of what
// tollgate is for. It runs the real ext_proc server (package extproc) with
// the real scheduler, a simulated Envoy (test/envoysim) in front of it and
// simulated vLLM workers (test/mockworker) behind it, all on loopback, and
// drives eight scenarios through them:
//
//   - premium: NVIDIA Dynamo's premium/regular policy-class experiment. One
//     worker with four sequences, 320 premium and 320 regular requests of
//     exactly 512 uncached tokens released at once, run twice, with the
//     quanta of examples/equal_share.yaml (512:512) and of
//     examples/premium_4x.yaml (512:128). Deficit Round Robin across the two
//     classes decides who gets the worker whenever a prefill ends; the table
//     compares the first 320 completions with the ideal split and with the
//     numbers upstream observed.
//   - priority: SMG priority admission with examples/priority.yaml on two
//     workers of 128 slots: bulk jobs are held to the slots the higher
//     classes do not reserve while interactive traffic passes them, a tenant
//     without a tenant policy has its system header clamped to default, and
//     an interactive burst that finds no slot preempts one bulk job that has
//     not produced its first token.
//   - engine: a worker also busy with traffic tollgate did not route, run
//     with tollgate's bookings only, then with the engines' metrics; the
//     table gives the time to first token and that worker's peak queue.
//   - kvevents: 24 chat sessions of 6 turns sharing 3 system prompts on 4
//     workers whose prefix caches hold 2,560 tokens, while clients that do
//     not go through tollgate evict conversations; run with tollgate's
//     approximate prefix index, then with the workers' KV events. The table
//     compares the cached-token estimate with the cached_tokens each worker
//     reports, the hit rate and the time to first token.
//   - fairness: a noisy neighbour in one policy class. One worker, a busy
//     gate that queues past three prefills; tenant auth:noisy floods 500
//     requests, then auth:quiet sends 50 spread over the drain. Run with
//     --fairness none (Dynamo's FCFS lane) and --fairness tenant (DRR
//     between the tenants' flows); the table gives each tenant's wait p50
//     and p99 and its share of the service while both had requests waiting.
//   - gateways: the premium_4x.yaml arm of premium with its requests
//     arriving through two simulated Envoys, 3:1, each in front of its own
//     tollgate replica in replica mode (extproc.Config.Replica), one of
//     them elected the scheduler for both: the 4:1 split is the
//     scheduler's whatever the ingress, and the table gives each
//     gateway's part of it.
//   - rollout: a rolling update. Three replicas in replica mode, each
//     behind its own simulated Envoy, in front of premium's worker with
//     premium_4x.yaml; eight premium and eight regular clients send one
//     request at a time through all of them. Each replica in turn hands
//     the scheduler over if it holds it (the demo plays the election:
//     SetActive and SetLeader, as the Lease or etcd would), drains and
//     stops while its Envoy's share goes to the other fronts, and comes
//     back new with the same identity. The table gives the requests sent,
//     completed and lost, the admission pause at each handover as the
//     clients saw it beside tollgate_peer_admission_pause_seconds, and
//     the premium:regular split while both classes had requests waiting.
//   - pd: prefill/decode disaggregation. Four workers of 8 sequences, each
//     running one vLLM-style shared batch (mockworker.BatchConfig: steps of
//     at most 2,048 tokens lasting 5 ms + tokens / 40,000 per second, so
//     that a long prefill stretches the token gaps of the sequences
//     decoding beside it), get one streamed request every 18 ms (at speed
//     1), one in twenty a unique 8,192-token prompt and the rest unique
//     100-token prompts; run with every worker role both (nothing is
//     split), then with one prefill-role and three decode-role workers,
//     where tollgate splits every long prompt. The table gives each arm's
//     and prompt kind's time to first token and inter-token latency p50
//     and p99 as the client reads the stream, the splits the client saw
//     against tollgate_pd_split_requests_total, the prefill halves served
//     and the engines' steps, and tollgate_decision_latency_seconds'
//     median.
//
// Each scenario prints a live progress line, a result table, and an SVG
// chart (WriteSVG) whose subtitle says what the scenario does and whose
// panels show its result: cumulative completions per class over time, and
// what the scenario measures (an engine queue, the cached-token estimate
// error, time to first token, the gaps between routing answers), with
// units in the legends. Serve keeps the
// whole stack up behind an HTTP address for curl or an OpenAI SDK.
//
// The configuration files are read from disk with the same loaders the
// serving command uses, exactly as a user would pass them with
// --router-policy-config and --priority-scheduler-config. Unless
// Options.Examples names a directory, they are the copies of examples/
// built into the program (package examples), written to a temporary
// directory for the run.
//
// # Invariants
//
// Every server the package starts listens on 127.0.0.1 (the Serve front
// listens where the caller says) and is stopped, with every goroutine it
// started, before Run, Serve or a scenario function returns. Results are
// computed only from what a client observes, cross-checked against the
// server's own counters (Server.Stats and /metrics).
//
// # Concurrency
//
// Run and Serve are meant to be called once per process, from one
// goroutine; scenario functions may run concurrently with each other, each
// on its own stack. Requests run on one goroutine each; a recorder guarded
// by a mutex collects their outcomes, and a progress goroutine reads it.
package demo
