// Package discovery holds the end-to-end tests of Kubernetes discovery:
// the sources and the leader elector of extproc/discovery/kube, over fake
// clientsets, drive the real extproc.Server behind test/envoysim (a
// simulated Envoy ext_proc filter and ORIGINAL_DST router) in front of
// test/mockworker engines. Each test runs on an in-memory network
// (test/memnet) inside a testing/synctest bubble, on fake time.
//
// The Kubernetes fixtures are test/kubefixture's, shared with kube's own
// unit tests. The tests live here, not in package kube, because nothing
// under extproc/ imports the shell package extproc.
package discovery
