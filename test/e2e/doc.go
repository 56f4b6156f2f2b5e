// Package e2e holds tollgate's end-to-end tests: the real extproc.Server
// with the real scheduler, behind test/envoysim (a simulated Envoy ext_proc
// filter and ORIGINAL_DST router) and in front of test/mockworker engines,
// all inside go test. Each test checks, when it ends, that the scheduler
// holds no slot, queue entry or booking and that no goroutine leaked.
//
// Tests without KV events run the whole stack on an in-memory network
// (test/memnet) inside a testing/synctest bubble: time is fake, timers fire
// at their exact instant, and the tests wait for the stack's state by
// waiting until every goroutine is blocked, never by sleeping or polling.
// The KV-event tests need ZeroMQ over TCP and wait on the event index's
// change notifications.
package e2e
