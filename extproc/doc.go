// Package extproc is tollgate's imperative shell: the Envoy ext_proc gRPC
// service (envoy.service.ext_proc.v3.ExternalProcessor), the per-stream
// phase state machine, the dispatcher that alone owns the scheduling core
// (package sched), header and subset handling, receive limits, gRPC
// options, health and the shell's metrics.
//
// The shell uses the sides, each a package under extproc/ that never
// imports it (docs/architecture.md): intake turns headers and bodies into
// scheduler requests and prices them (its CacheView owns the prefix
// indexes); fleet validates and applies worker sets (one Applier hands
// the dispatcher, the cache view, the scraper, the KV events and the
// metric labels their projection of each set); answer holds the one table
// that maps every refusal to its HTTP answer; the engine adapters
// (engine/kvevents, engine/enginemetrics) feed what the engines report;
// discovery/kube reports what the cluster holds; request/openai and
// request/tokenize are the request libraries.
//
// # Concurrency model
//
// Every HTTP request is one gRPC Process stream, served by its own stream
// goroutine (Server.Process). That goroutine does all per-request CPU work
// in parallel with the others: header parsing, then the planner
// (extproc/intake): tenant resolution, JSON parsing, tokenizing, prefix
// hashing and the cache view's lookup. It receives Envoy's messages
// itself, and only ever receives: it waits in Recv for Envoy's next
// message also while its request waits for the scheduler, so Envoy's own
// local reply to a queued request (Envoy 1.37 and later) is answered at
// once and frees the queue place. What arrives meanwhile from elsewhere
// (the dispatcher's notices, the exchange's deadline, the dispatcher's
// end) is handled by a short-lived goroutine under the stream's lock; one
// that ends the exchange also ends the Recv, through the stream's
// context. The wait for a stream's first message is bounded by cancelling
// the stream's own context (ServerOptions installs it), not by a
// goroutine.
//
// The dispatcher owns the *sched.Scheduler, the current worker set and
// the serving state (standby, draining, workers), which it publishes as
// one snapshot for gRPC health, /readyz and the state metrics, all behind
// one lock. An event (submit, release, first token, worker change,
// leadership, drain, stats, route) is applied by the goroutine that has
// it, under that lock, with no hand-off: a stream's submit is decided on
// the stream goroutine, which then sends the route itself. The lock is
// never held across I/O or while waiting on a stream: the dispatcher tells
// a stream what became of its request with one-shot notices (queued,
// decided, preempted) in a box that holds one of each; it does no JSON,
// hashing or other per-request work. One timer, set to the scheduler's
// NextDeadline while Server.Run runs, ticks the scheduler under the same
// lock. Time is read only in the shell and handed to the scheduler as an
// argument.
//
// With Config.EngineMetrics set, Server.Run also runs an
// enginemetrics.Scraper (its goroutines end before Run returns): it reads
// every worker's engine metrics and hands each batch of readings to the
// dispatcher as one more event (ReportLoad). A scrape that hangs or fails
// only delays its own worker's next reading.
//
// # Who owns a request
//
// Each stream's exchange keeps Envoy's side of the request (modes, held
// messages, shadows of Envoy's message timers, the response); its
// admission keeps the request's place in the scheduler's lifecycle (idle,
// submitted, queued, in flight, released) and is the only path to the
// scheduler's Release.
//
//  1. Headers and body: the stream goroutine, alone. Nothing is booked; a
//     client that leaves costs nothing.
//  2. Submitted: the dispatcher owns the queue entry. If the client goes
//     away (Envoy resets the stream) or the hold deadline passes, the
//     stream releases the request at once and it leaves the queue.
//  3. Dispatched: the scheduler holds a slot and the worker booking; the
//     admission owns the obligation to release them. The first non-empty
//     response body chunk reports FirstToken (prefill done); the response's
//     end_of_stream (or trailers), or the end of the stream, releases the
//     request. It is released exactly once, whatever the order of events.
//  4. Rejected: the scheduler already forgot the request; the stream sends
//     the ImmediateResponse and ends.
//
// # Envoy protocol
//
// The negotiated body modes and send_body_without_waiting_for_header_response
// are read from protocol_config on the first message (absent: BUFFERED).
// Every reply matches one outstanding message, in order; the only extra
// message is one bare override_message_timeout per held message. Header
// mutations always set raw_value only with append explicitly false, never
// touch x-envoy-* or :authority, and are sorted by name.
//
// Request path, for requests under admission (POST /v1/completions,
// /v1/chat/completions, /v1/embeddings, /v1/responses, /generate):
//
//   - Headers with end_of_stream (no body): decided at the headers. An
//     admission route then has an empty body, which is a 400.
//   - BUFFERED (and BUFFERED_PARTIAL): the headers are answered CONTINUE at
//     once; the body message is held and its reply carries the route (a
//     header mutation in a body reply takes effect in BUFFERED mode).
//     Trailers arriving meanwhile are answered after it.
//   - STREAMED with send_body_without_waiting_for_header_response: the
//     headers reply is held while the chunks arrive unanswered; at the
//     decision the headers reply carries the route, then every chunk is
//     answered CONTINUE in order. Envoy queues the unanswered chunks against
//     its buffer limit, so --max-body-bytes should not exceed it.
//   - STREAMED without that flag, and NONE: Envoy sends no body before the
//     headers reply, and a route in a later body reply would come after the
//     router picked its host. tollgate therefore decides at the headers,
//     without the body: model unknown, prompt length 0 (priority, class and
//     pin headers still apply). Later chunks are answered CONTINUE. This
//     degraded mode exists so such a configuration still routes; the shipped
//     configurations use BUFFERED or FULL_DUPLEX_STREAMED.
//   - FULL_DUPLEX_STREAMED: headers and chunks are held; at the decision the
//     headers reply carries the route, then the body is streamed back in
//     chunks of at most 62,000 bytes with end_of_stream on the last (unless
//     trailers follow), then the trailers are answered.
//
// Requests outside admission (GET /v1/models, health checks, any other
// path) are neither queued nor counted; they wait for their body in the
// same way, then go to the least-loaded ready worker serving the model
// named by the body, if any.
//
// The route is x-gateway-destination-endpoint: IP:port (overwriting any
// value the client sent), the same value as dynamic metadata
// envoy.lb/x-gateway-destination-endpoint, and for a worker with more than
// one data-parallel rank x-data-parallel-rank: <rank>, the header vLLM reads
// to place a request; for a single-rank worker that header is removed.
//
// As the Gateway API Inference Extension's endpoint picker, tollgate also
// reads the data plane's endpoint subset (metadata_context
// envoy.lb.subset_hint/x-gateway-destination-endpoint-subset), which
// restricts the request's eligible workers (503 when it admits none);
// with Config.Sched.Fallbacks it names next-best workers after the route,
// comma-separated, and follows the endpoint the data plane reports in
// envoy.lb/x-gateway-destination-endpoint-served; and it can rewrite the
// request's model name (Config.ModelRewrites, and the InferenceModelRewrite
// rules installed with Server.SetModelRewrites), giving the client its own
// name back in STREAMED, FULL_DUPLEX_STREAMED and BUFFERED responses.
//
// # Holding and Envoy's message timer
//
// Envoy starts message_timeout (--envoy-message-timeout) for each message
// it sends and restarts it with each new one. While a request is queued
// its held message would time out; so right after the scheduler reports it
// queued, tollgate sends one bare override_message_timeout for the whole
// remaining budget, min(--envoy-max-message-timeout, class queue timeout +
// margin). If Envoy allows no override (max 0), or the budget runs out
// anyway, the request gets the 503 queue-timeout answer a margin before
// Envoy's timer would fire, and is cancelled in the scheduler.
// FULL_DUPLEX_STREAMED has no message timer; there the scheduler's queue
// timeout alone bounds the wait.
//
// # Preemption
//
// A victim is an admitted request without a first token. To keep it
// answerable until then, its response_headers reply is held until the first
// non-empty response body chunk, but only where Envoy sends body chunks
// before that reply: response mode FULL_DUPLEX_STREAMED, or STREAMED with
// send_body_without_waiting_for_header_response. Empty chunks are held too;
// the first non-empty one (or the end of the response) releases the headers
// and every held chunk in order. If Envoy's timer for the held headers
// would fire, tollgate extends it once (override, --envoy-max-message-timeout)
// and, at the next deadline, releases the headers. Only requests whose
// dispatch the scheduler marked Preemptible (some higher can_preempt class
// could preempt them) are held.
//
// When the scheduler preempts a request before its first token, it is
// answered with the ImmediateResponse 503 scheduler_preempted, Retry-After:
// 1, X-SMG-Error-Code, X-SMG-Preempted: true and SMG's JSON body, whatever
// is outstanding: Envoy accepts an unsolicited ImmediateResponse whenever
// its processing is not complete. With no response started it becomes
// Envoy's local reply; with the response headers held it goes straight to
// the client; once the headers went out Envoy can only reset the stream.
// After its first token went out, the victim has won the race and carries
// on; its slot is freed when it ends. In every case the victim is then
// released. With response modes that cannot hold (BUFFERED, NONE,
// STREAMED without the flag) the headers are answered at once.
//
// # Envoy's own answers
//
// Since Envoy 1.37 its own local replies pass through ext_proc while
// processing is incomplete: the 413 for a BUFFERED body over the listener
// buffer, the connection manager's 504 (or 408) when stream_idle_timeout
// or request_timeout fires on a held request, and the router's 503s.
// Response headers that arrive before the route are such a reply: the
// request is released (its queue place or slot is free), held request
// messages are dropped, and the reply is answered with CONTINUE to its end,
// where the stream ends cleanly. The client sees Envoy's status. A request
// that waits in the queue reads no message, so such a reply reaches it only
// with its decision; Envoy's message timer on that reply, the client's
// reset or tollgate's answer at the queue timeout ends the stream first,
// which releases the queue place. After the route, only a 2xx response is a worker's: any
// other status is never a first token and feeds no usage comparison.
// tollgate_envoy_local_replies_total counts the replies before the route.
//
// # Accounting limits
//
// tollgate sees a request's end only through the response messages Envoy
// sends it. With response_header_mode SKIP and no response body mode, Envoy
// 1.37+ closes the side stream right after the route (earlier releases when
// the request ends), and tollgate releases the request then: the
// scheduler's load bookkeeping then tracks admissions, not running
// requests. The shipped configurations send response headers and a streamed
// response body.
//
// # Answers
//
// One table, in extproc/answer, maps every outcome to its status, headers
// and JSON body; the shell asks answer.For (and answer.FromIntake for
// intake's refusals) and sends the ImmediateResponse it renders. Nothing
// else chooses a status code.
package extproc
