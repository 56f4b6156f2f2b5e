// Package peer is the channel between a front and the scheduler: every
// replica is a front that serves Envoy, and one elected replica is the
// scheduler. A front holds one bidirectional gRPC stream to the scheduler
// (service tollgate.peer.v1.Scheduler, method Connect) and sends Up
// messages on it; the scheduler answers with Down messages.
//
// The service is registered by hand (no protoc) and its messages are JSON
// (a codec named tollgate-peer-json). The channel runs on its own gRPC
// server and listener, apart from the ext_proc server and its codec.
//
// Nothing a peer announces is trusted: gRPC refuses a message over
// MaxMessageBytes by its length prefix, before reading it, and every
// message received is validated (Up.Validate, Down.Validate) before it is
// handed on, so a peer's lists and strings are bounded before the
// scheduler or the front allocates anything for them.
//
// TLSConfigs builds the channel's TLS from the ext_proc listener's files:
// mutual TLS against a client CA, or, without one, a certificate shared
// by all replicas and pinned by both sides.
package peer
