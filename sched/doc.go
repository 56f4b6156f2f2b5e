// Package sched is tollgate's scheduling core: NVIDIA Dynamo's router
// policy-class queues (Deficit Round Robin across classes, FCFS/WSPT inside a
// class or EDF inside a flat SLO class, exact-worker lanes, busy thresholds,
// per-worker queue limits, SLO deadlines) and SMG's priority admission (slot
// reservations per priority class, queue size and timeout, starvation
// promotion, preemption) unified in one queue model, behind SMG's rate
// limits (the request bucket and the tenant budgets).
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
// Lifecycle of a request: Submit either dispatches it at once
// (ActionDispatch), rejects it (ActionReject), or queues it, and then says
// so: an ActionQueue is the last action of a Submit whose request is still
// queued when the call returns. A queued request leaves the queue exactly
// once: dispatched by a later call (an ActionDispatch), rejected (an
// ActionReject: queue timeout, deadline passed, worker removed, shutdown),
// or released by the shell (Release) without an action. A request waiting
// in SMG's legacy admission queue is queued too, with one ActionQueue
// whichever queues it waits in. A dispatched request holds its slot and
// its worker booking until Release; FirstToken releases its prefill tokens
// early. Release is the one way the shell gives a request
// back, whether the client left, the response ended or a preemption was
// answered. Every call returns the actions it caused, in order; the
// returned slice is reused by the next call, so copy to retain.
//
// Draining: after Drain and until Resume, every queued request has been
// rejected with OutcomeShutdown and Submit rejects every arrival with
// OutcomeShutdown, even one that could be dispatched at once (the check
// follows the duplicate-id check, before the pin and eligibility). Requests
// in flight run to their Release. The shell relies on this rule alone; it
// does not keep its own.
//
// # Gates in front of the queues
//
// Submit runs SMG's request bucket first (admission.go, on bucket.go's
// token bucket): with priority admission the request-rate check
// (OutcomeRateLimited), without it the legacy admission, whose waiters are
// parked in arrival order until a token frees or QueueTimeout passes
// (OutcomeAdmissionFull, OutcomeAdmissionTimeout). Then the tenant budgets
// (budget.go): the request reserves its prompt tokens and one request from
// its tenant's scope and its model rule's, or is rejected with
// OutcomeTenantRateLimited; Usage settles the tokens. A parked waiter
// reserves when it leaves the admission queue. Then the policy class: a
// flat profile rejects an unknown class name (OutcomeUnknownClass), and a
// flat class fixes the deadline arrival + SLO (slo.go). A request already
// past its deadline when it would be queued is shed at once
// (OutcomeDeadlineExceeded, stage admission); a queued one is shed at the
// start of the first call after its deadline (stage dispatch), without
// charging its class's deficit.
//
// # The unified queue model
//
// Each served model name has one queue: a DRR ring over the policy classes of
// the model's profile (Config.Policy.ProfileFor), created on the first request
// for a model that some worker serves. Workers without a model serve any name
// a client sends, so past 1024 queues a name that neither the policy file nor
// a worker names shares the empty name's queue (its eligibility stays its
// own). A queued request sits in one lane of its class (shared, or the exact
// (worker, rank) it is pinned to) and on the wait list of its priority class. A dispatch pass pops one entry per queue
// in round-robin across models until no queue yields; it runs after every
// call that can make a queued request dispatchable, including every enqueue
// (upstream Dynamo waits for the next load event instead).
//
// With Config.Fairness enabled, each lane holds one flow per
// Request.FairnessKey (bounded per lane; further keys share an overflow
// flow) and serves its flows by Deficit Round Robin over the same cost;
// the lane head is the head of the flow served next, and the queue key
// orders requests inside a flow. Off, every lane is Dynamo's single queue.
//
// A lane head is dispatchable when both gates pass. The worker gate
// (Dynamo), only for a class with a busy threshold: not every eligible rank
// is prefill-busy (or, with busy_worker_ratio, fewer than ratio × eligible
// ranks are), or the pinned rank is not busy. The slot gate (SMG), only with
// the priority scheduler enabled, for every class: free(class) > 0 under the
// reservation formula, or in_flight < capacity for a starvation-promoted
// request. A request with no eligible worker at all is dispatchable, even
// while the slot gate is closed, and is then rejected with
// OutcomeNoEndpoints, so it never waits for nothing.
//
// An arrival queues when either gate says so: its class has a threshold and
// already a backlog (no bypass) or a closed worker gate; or the slot gate is
// on and a request of the same or a higher priority class is already queued
// in its policy class (no barging: FIFO hand-off) or its class has no free
// slot. Entry into a queue is checked in order: a flat class's deadline
// (OutcomeDeadlineExceeded), SMG queue_size (OutcomeQueueFull), Dynamo's
// per-worker limits (OutcomeClassLimit). A queued arrival of a can_preempt class that found
// no free slot then preempts at most one victim: the newest in-flight
// request, without a first token, of the lowest class below its own. The
// victim's slot goes to its preemptor first when the victim ends.
//
// Engine reports (ReportLoad, engine.go), when EngineConfig enables them,
// correct the bookings: a rank whose fresh report shows a queue or KV usage
// past a threshold is busy for the worker gate and passed over in
// selection while another is not; a stale report counts for nothing; a
// warm start seeds slots from the engines' running requests after New or
// Resume; workers without a slot count take the engine's. A worker's
// seeds hold at most that worker's own slots, so no report, however large,
// closes the gate for the other workers. While the warm start holds the
// slot gate, arrivals wait for its end (or their queue timeout) instead of
// being refused by a queue limit; the limits and preemption apply when it
// ends (warm.go). The scheduler only sees reports as data with their read
// time; it never reads a clock.
//
// Invariants: every request reaches exactly one outcome; a queued entry is
// in exactly one lane and one wait list; the load booked on each rank equals
// the sum over the requests in flight there; slots in flight never exceed
// the capacity except right after a shrink, and then only decrease; the
// slots a worker's seeds hold never exceed its own slots; no
// queued request has passed its queue timeout after Tick(now) (priority
// scheduler on); after any call at now, no queued request is past its
// deadline and no admission waiter has waited QueueTimeout. Timeouts and promotions are driven by NextDeadline and
// Tick; nothing polls. Steady-state Submit, dispatch and Release allocate
// nothing: entries are pooled and the returned actions slice is reused.
package sched
