// Command nullextproc is the baseline of tollgate's end-to-end benchmark:
// an Envoy ext_proc server that does no work. It answers every message at
// once, in the reply shapes tollgate uses for the negotiated processing
// mode, and routes every request to one fixed endpoint with the
// x-gateway-destination-endpoint header and the same value as envoy.lb
// dynamic metadata. Whatever tollgate costs above it is the price of
// admission and routing.
//
//	nullextproc --endpoint 127.0.0.1:8000 [--grpc-addr 127.0.0.1:0]
//
// Once listening it logs one JSON line on stderr with "msg":"serving" and
// the bound "grpc" address, as tollgate does, and serves until SIGINT or
// SIGTERM.
//
// Replies per message (the route goes into the first reply where Envoy
// applies a header mutation, as tollgate does it):
//
//   - request headers: CONTINUE; with the route when no BUFFERED body
//     follows (no body, NONE, STREAMED, FULL_DUPLEX_STREAMED);
//   - request body: BUFFERED, CONTINUE with the route; STREAMED, CONTINUE;
//     FULL_DUPLEX_STREAMED, the chunk echoed back as a streamed_response;
//   - request and response trailers: an empty trailers reply;
//   - response headers: CONTINUE; response body: CONTINUE, or the chunk
//     echoed back in FULL_DUPLEX_STREAMED mode.
//
// Every stream is served by its handler goroutine alone; the replies
// without a body are built once and shared, read-only.
package main
