// Package envoy holds tollgate's Envoy deployment artefacts and the code
// that proves them sound without a running Envoy.
//
// The directory carries two standalone bootstraps (envoy.yaml with BUFFERED
// request bodies, envoy-full-duplex.yaml with FULL_DUPLEX_STREAMED), an
// Istio EnvoyFilter (istio/) and Envoy Gateway policies (envoy-gateway/).
// README.md says which file serves which gateway.
//
// The package decodes each artefact strictly (an unknown or misspelled
// field is an error), runs the protoc-gen-validate rules of every Envoy
// message including those packed in google.protobuf.Any, and then applies
// the checks Envoy itself only makes at load time (ORIGINAL_DST needs
// CLUSTER_PROVIDED, FULL_DUPLEX_STREAMED needs trailers and fail-closed,
// and so on) plus tollgate's own requirements (Needs): fail closed, the
// envoy.lb metadata namespace, the processing modes tollgate depends on,
// send_body_without_waiting_for_header_response, the source.address
// request attribute while tollgate reads it, an HTTP/2 ext_proc cluster
// with raised circuit breakers, and every timer that counts queue time
// longer than tollgate's longest queue wait.
//
// The standalone bootstraps need Envoy 1.36 or later (status_on_error).
//
// Invariants: decoding never panics on input; every check returns all the
// problems it finds, joined, each naming the object and field at fault.
//
// Concurrency: the functions keep no state and are safe for concurrent use.
package envoy
