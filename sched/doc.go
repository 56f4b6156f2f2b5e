// Package sched is tollgate's scheduling core: NVIDIA Dynamo's router
// policy-class queues (Deficit Round Robin across classes, FCFS/WSPT inside a
// class, exact-worker lanes, busy thresholds, per-worker queue limits) and
// SMG's priority admission (slot reservations per priority class, queue size
// and timeout, starvation promotion, preemption) unified in one queue model.
//
// The package is pure: it imports only the standard library, starts no
// goroutines, never reads the clock (every operation takes now as an
// argument), and does no I/O, logging or metrics. Randomness comes from a
// seeded source in Config. Observability is data: Stats returns a snapshot
// and every Action carries what the shell needs for its metrics.
//
// A Scheduler is not safe for concurrent use. In tollgate one dispatcher
// goroutine owns it; stream goroutines talk to that goroutine over a channel.
//
// Lifecycle of a request: Submit either dispatches it at once, rejects it, or
// queues it. A queued request leaves the queue exactly once: dispatched (an
// ActionDispatch), rejected (ActionReject: queue timeout, worker removed,
// shutdown), or cancelled by the shell (Cancel). A dispatched request holds
// its slot and its worker booking until Done or Cancel; FirstToken releases
// its prefill tokens early. Every call returns the actions it caused, in
// order; the returned slice is reused by the next call, so copy to retain.
package sched
