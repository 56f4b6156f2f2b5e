// Package e2e holds tollgate's end-to-end tests: the real extproc.Server
// with the real scheduler, behind test/envoysim (a simulated Envoy ext_proc
// filter and ORIGINAL_DST router) and in front of test/mockworker engines,
// all inside go test. Each test checks, when it ends, that the scheduler
// holds no slot, queue entry or booking and that no goroutine leaked.
package e2e
