// Package envoysim is a simulated Envoy for tests and demos: the ext_proc
// HTTP filter in front of a router and an ORIGINAL_DST cluster. It lets the
// whole request path (client, ext_proc server, worker) run inside go test
// without an Envoy binary.
//
// A Sim talks to a real ext_proc gRPC server over one shared connection and
// to real upstreams over HTTP/1.1. Do sends one request and returns what the
// client would see; Handler puts the Sim behind a real HTTP listener and
// streams responses (server-sent events included) to the client as they
// arrive.
//
//	sim, err := envoysim.New(envoysim.Config{
//		ExtProcAddr:       "127.0.0.1:9002",
//		Mode:              mode, // nil: Envoy's default processing mode
//		MessageTimeout:    time.Second,
//		MaxMessageTimeout: time.Minute,
//	})
//	if err != nil { ... }
//	defer sim.Close()
//	resp, err := sim.Do(ctx, envoysim.Request{Method: "POST", Path: "/v1/chat/completions", Body: body})
//	// resp.Status, resp.Header, resp.Body, resp.Endpoint, resp.Timings, sim.Stats()
//
// # Envoy behaviours modelled
//
//   - One Process stream per HTTP request, opened when the first message is
//     sent, multiplexed with the others over one gRPC connection.
//   - Message order per processing mode: request headers (always SEND),
//     request body NONE, STREAMED, BUFFERED or FULL_DUPLEX_STREAMED, request
//     trailers, response headers SEND or SKIP, response body NONE, STREAMED
//     or BUFFERED, response trailers. protocol_config only in the first
//     message; request attributes only in the first request message.
//   - Headers as Envoy sends them: lower-case keys, raw_value only,
//     pseudo-headers (:authority, :path, :method, :scheme; :status on
//     responses), x-forwarded-proto and x-request-id, no hop-by-hop headers.
//   - Body shapes: no body, or an HTTP/1 Content-Length: 0 body, means
//     request_headers end_of_stream=true and no body message; an empty
//     HTTP/2 or chunked body is one empty end_of_stream body message;
//     STREAMED bodies go in configurable chunks, pipelined; BUFFERED bodies
//     in one message, sent only after the headers reply; an upstream
//     (HTTP/1) response always ends with an empty end_of_stream chunk,
//     content-length or not.
//   - The message timer (message_timeout, default 200 ms) for every message
//     sent, stopped by every answer; none in a FULL_DUPLEX_STREAMED
//     direction. Expiry gives 504 (ext_proc_error_per-message_timeout_exceeded)
//     and closes the stream.
//   - override_message_timeout: accepted only within [1 ms,
//     max_message_timeout], while a timer runs, once per outstanding message;
//     every other field of that message is ignored; the new timer counts from
//     receipt.
//   - Reply classification: the matching oneof for the outstanding state, a
//     bare override, or an ImmediateResponse; anything else (wrong oneof,
//     nothing outstanding, no oneof at all) is spurious and gives
//     status_on_error (default 500).
//   - Stream end: a clean close before an answer lets the request continue
//     unmodified (fail open); a gRPC error, an unopenable stream or an
//     oversized reply gives status_on_error; failure_mode_allow turns
//     errors, timeouts and spurious messages into "continue without
//     ext_proc".
//   - Header mutations: raw_value only (value alone sets an empty header,
//     value beside raw_value is ignored, as since 1.32), the deprecated
//     append flag (default overwrite),
//     append_action ignored, the default mutation_rules (x-envoy-*, host,
//     :authority, :scheme, :method refused and counted; pseudo-headers and
//     host never removed), invalid characters and header count/size limits
//     as errors, content-length not settable when the body may change.
//   - Header mutations in a body reply apply only in BUFFERED mode while the
//     headers are held; BUFFERED body mutations must match content-length.
//     CONTINUE_AND_REPLACE on a headers reply replaces the body and ends the
//     direction.
//   - clear_route_cache is counted as ignored without a header mutation.
//   - dynamic_metadata is kept only for receiving_namespaces (default
//     envoy.lb in this simulator; Envoy's own default is none).
//   - ImmediateResponse: its status (missing or below 200 becomes 200),
//     headers (checked by the mutation rules) and body; the stream closes.
//     After the response started it can only reset the stream.
//   - Stream closing: right after the last needed reply on 1.37+ (a
//     headers-only configuration closes before the upstream is even called;
//     earlier releases keep it open until the HTTP stream ends), on errors,
//     and when the client goes away; by reset (the default: the server's
//     context is cancelled) or by half-close (io.EOF for the server, reset
//     after remote_close_timeout, 1 s, unless the server ends the stream).
//   - ORIGINAL_DST: the metadata key first, then the header (first value);
//     only a literal IP:port routes; otherwise original_dst_host_invalid and
//     503 "no healthy upstream". Connect failures give Envoy's 503; an
//     upstream reset after its headers resets the client's stream.
//   - Envoy's own local replies (the router's 503s, the 413 below, the
//     connection manager's 504s) go through the ext_proc response
//     direction like an upstream response on 1.37+ while processing is
//     incomplete: response_headers, then the body as one end_of_stream
//     chunk. Replies to request messages still outstanding are accepted
//     and change nothing. Releases 1.34 to 1.36 send them straight to the
//     client, and the side stream closes.
//   - BufferLimitBytes: a BUFFERED request body above it gets Envoy's 413
//     "Payload Too Large" (details request_payload_too_large), whether the
//     headers were answered or not. STREAMED and FULL_DUPLEX_STREAMED
//     bodies only apply back-pressure.
//   - StreamIdleTimeout and RequestTimeout: a held request gets 504
//     ("stream timeout", stream_idle_timeout; "request timeout",
//     request_overall_timeout), a started response is reset.
//   - Version (default 1.37+): local replies to the processor and the
//     early stream close from 1.37; status_on_error from 1.36 (500 before).
//   - request_attributes: only the configured attributes are sent.
//   - send_body_without_waiting_for_header_response: in a STREAMED
//     direction, body chunks go out while the headers message is
//     outstanding, each restarting the message timer; an ImmediateResponse
//     while response headers are held reaches the client in full.
//   - Stats named after Envoy's ext_proc counters.
//
// # Not modelled
//
//   - Route selection: virtual hosts, route matching, per-route ext_proc
//     overrides (ExtProcPerRoute), and what clear_route_cache would change.
//   - Flow control: 500 for an oversized buffered response, watermarks and
//     back-pressure, BUFFERED_PARTIAL.
//   - Circuit breakers on the ext_proc or upstream cluster, retries, route
//     timeouts, connection pools beyond one HTTP transport. The 408 of a
//     connection manager timeout before the whole request was received
//     (the simulator always has it).
//   - Other differences between releases: v1.34 failing open on a spurious
//     message, the ImmediateResponse mutation check before 1.36, the FULL_DUPLEX_STREAMED
//     plus failure_mode_allow rejection of 1.35 only (the simulator rejects
//     it on every release).
//   - mode_override and allowed_override_modes (ignored, which is Envoy's
//     behaviour without allow_mode_override), observability mode, GRPC body
//     mode, streamed_immediate_response (treated as spurious),
//     request_header_mode SKIP, FULL_DUPLEX_STREAMED on the response path,
//     forward_rules, metadata forwarding (metadata_context), typed metadata,
//     configurable mutation_rules and disallow_is_error, route_cache_action.
//   - The HTTP connection manager's own request handling: header
//     sanitization of x-envoy-* from untrusted clients, x-forwarded-for,
//     regeneration of a client's x-request-id (the simulator keeps it), and
//     local reply body rewriting (local_reply_config).
//   - A clean close in the middle of a FULL_DUPLEX_STREAMED body is answered
//     with status_on_error (details ext_proc_error_full_duplex_body_incomplete)
//     because the body was handed to the server and not streamed back.
//   - Server messages that arrive while the request is upstream are handled
//     as they arrive, not at Envoy's exact dispatcher ordering.
//
// # Concurrency
//
// A Sim is safe for concurrent use. Each request is driven by the goroutine
// that called Do (or serves the HTTP request), which owns all of the
// request's state and runs an event loop over the side stream, the message
// timer, the upstream call and the client's context. Helper goroutines (the
// stream's reader and sender, the upstream reader) only pass events to that
// loop and all end before Do returns, except a graceful stream close, which
// the Sim owns until the server ends the stream or the remote close timeout
// fires. Close ends everything and waits for it.
package envoysim
