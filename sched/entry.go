package sched

// laneKey names a lane inside a policy class: the shared lane (zero value)
// or the exact (worker, rank) lane of pinned requests.
type laneKey struct {
	worker string // empty for the shared lane
	rank   uint32
}

// exact reports whether this is an exact-worker lane.
func (k laneKey) exact() bool { return k.worker != "" }

// entry is one request inside the scheduler, queued or in flight. Entries
// are pooled by the scheduler.
type entry struct {
	id uint64

	// Queue key, set before ring.push and fixed while queued except through
	// ring.fix. Order: promoted first, then strict desc, score desc, seq asc.
	// strict is strictKey's class-then-hint tier.
	promoted bool
	strict   uint64
	score    float64
	seq      uint64
	cost     uint64 // scheduling_cost = max(1, uncached)
	class    int    // index in the ring
	lane     laneKey
	// flowKey is the fairness key: the flow of its lane the entry joins
	// when fairness is on.
	flowKey string

	// Cost snapshot, kept by the ring's per-class stats.
	isl    uint64
	cached uint64

	// q is owned by ring.go: heap position and lane links.
	q queueLinks

	// The remaining fields are owned by scheduler.go.

	state entryState
	prio  Priority // effective SMG class
	// model is the request's model name: eligibility, limits and actions
	// use it, since mq may be the queue shared by overflow names.
	model string
	flags entryFlags // first token seen, marked as a victim, preemptible
	mq    *modelQueue
	// enq is when the request was submitted (and queued, if it queued), as
	// an offset from the scheduler's origin.
	enq instant
	// arrival is when the request reached tollgate (Request.Arrival, else
	// the Submit time); deadline is arrival + its class's SLO, and dpos
	// its index in the deadline heap (-1 when not there; slo.go).
	arrival, deadline instant
	dpos              int
	// park holds the request while it waits for an SMG admission token
	// (admission.go); nil otherwise.
	park *Request
	// budget is the tenant reservation the request holds (budget.go).
	budget reservation
	// rank is the pinned rank while queued (exact lanes only) and the
	// booked rank while in flight.
	rank *rankState
	// prefill is the prefill load booked on rank (or on prank) and not yet
	// released.
	prefill uint64
	// prank is the rank running the prefill half of a split request, nil
	// for a whole one (pd.go).
	prank *rankState
	// epoch is the rank's report epoch when e was booked (engine.go).
	epoch uint32
	// first is when e, in flight, left its rank's prefilling count: its
	// first token (engine.go).
	first instant
	// prev and next link the entry into one intrusive list at a time: its
	// priority's wait list while queued, its priority's preemptible list
	// while in flight and preemptible, the free list while pooled.
	prev, next *entry
	// peer links a queued preemptor and its in-flight victim both ways.
	peer *entry
	// taints, allowed and cachedTokens are reusable copies of the
	// request's RequiredTaints, AllowedWorkers and Cached.
	taints       []string
	allowed      []string
	cachedTokens []CachedTokens
}

// need is what e asks of a worker.
func (e *entry) need() need { return need{model: e.model, taints: e.taints, allowed: e.allowed} }
