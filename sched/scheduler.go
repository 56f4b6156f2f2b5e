package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Scheduler is the unified queue model. See the package documentation.
type Scheduler struct {
	cfg       Config
	prio      bool // the SMG slot gate and its admission features are on
	blockSize uint64
	sel       SelectionConfig
	rnd       *rand.Rand
	// fb backs the Fallbacks of the current call's actions (fallback.go).
	fb []RankRef
	// fbCost holds the costs of the fallbacks being chosen.
	fbCost    []float64
	origin    time.Time
	originSet bool
	draining  bool

	// Worker set and load book (workers.go); prefillWorkers counts the
	// prefill-role workers (pd.go).
	workers        []*workerState
	byID           map[string]*workerState
	ranks          map[laneKey]*rankState
	prefillWorkers int
	// splitCount counts the dispatches split into prefill and decode.
	splitCount uint64

	// Queues (queue.go). active lists the queues with queued entries; rr
	// is the dispatch pass's round-robin position in it.
	models      map[string]*modelQueue
	order       []*modelQueue
	active      []*modelQueue
	rr          int
	seq         uint64
	queuedTotal int
	// unservable counts the queued entries no worker can serve (flagged
	// flagUnservable): they need no slot, so the slot gate does not stop a
	// pass while there are any.
	unservable int
	wait       [NumPriorities]waitList

	// Slot pool (slots.go).
	capacity      uint32
	reserved      [NumPriorities]uint32
	inFlight      [NumPriorities]uint32
	inFlightTotal uint32
	preemptible   [NumPriorities]entryList
	// seeded is the slots the warm-start seeds hold, each worker's at
	// most its own slots. While warming the slot gate admits nothing until
	// every rank has reported or warmUntil has passed, and arrivals that
	// queue meanwhile wait for their limits (warm.go); warmPending starts
	// a warm start at the next call (New and Resume have no time). now is
	// the time of the current call (engine.go).
	seeded      uint64
	warming     bool
	warmPending bool
	warmUntil   instant
	now         instant
	// slotBlocked records that an exact lane was found blocked by the slot
	// gate alone, so a freed slot must release the blocked lanes.
	slotBlocked bool

	// Counters for Stats. admits counts every outcome per effective class;
	// a preempted request counts as admitted and then as preempted.
	admits      [NumPriorities][NumOutcomes]uint64
	preemptions [NumPriorities][NumPriorities]uint64
	promotions  [NumPriorities]uint64

	// SMG's request bucket and its waiters (admission.go), the tenant
	// budgets (budget.go; nil when off) and the deadline heap of flat
	// policy classes (slo.go).
	adm       admission
	budgets   *budgets
	deadlines indexedHeap[*deadlineItem]
	// lateShed records that the current call began by shedding a queued
	// request (at).
	lateShed bool

	// Entries by request ID, and the pool of free ones.
	entries map[uint64]*entry
	pool    *entry

	// Reused per call: the returned actions, the predicate given to the
	// rings, and the selection scratch space.
	actions      []Action
	dispatchable func(*entry) bool
	cands        []*rankState
	costs        []float64
}

// entryState is where an entry is in its lifecycle.
type entryState uint8

const (
	stateNone entryState = iota
	stateQueued
	stateInFlight
	// stateParked: waiting for an SMG admission token (admission.go).
	stateParked
)

// entryFlags are per-entry booleans.
type entryFlags uint16

const (
	// flagFirstToken: the request produced its first token.
	flagFirstToken entryFlags = 1 << iota
	// flagVictim: the request was preempted; it is never chosen again.
	flagVictim
	// flagPreemptible: the request is on its class's preemptible list.
	flagPreemptible
	// flagSince: the request is counted in its rank's since-report count.
	flagSince
	// flagPrefilling: the request is counted in its rank's prefilling count.
	flagPrefilling
	// flagUnservable: the request is queued, unpinned, and no worker of the
	// set is eligible for it; it is counted in Scheduler.unservable.
	flagUnservable
	// flagWarm: the request queued while the warm start held the slot
	// gate; its entry limits and preemption wait for the hold's end.
	flagWarm
	// flagToken: the request holds an SMG legacy admission token.
	flagToken
	// flagWaited: the request waited for its SMG admission token; every
	// action about it reports that wait (Queued, Wait).
	flagWaited
)

// New builds a scheduler over an initial worker set. It fails when the SMG
// reservations exceed the capacity of that set, with a *ReservationError
// whose text is upstream's "sum of class reservations (N) exceeds capacity
// (M)", and when the configuration is malformed (profiles that would not
// resolve a request, non-finite numbers) or a worker has more than
// MaxDPSize ranks.
func New(cfg Config, workers []Worker) (*Scheduler, error) {
	if err := errors.Join(validateConfig(&cfg), cfg.Engine.validate(), validateWorkers(workers)); err != nil {
		return nil, err
	}
	if cfg.Policy.Fallback == nil {
		cfg.Policy.Fallback = SyntheticProfile(nil, FCFS)
	}
	if cfg.FallbackCapacity == 0 {
		cfg.FallbackCapacity = DefaultFallbackCapacity
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	sel := DefaultSelection()
	if cfg.Selection != nil {
		sel = *cfg.Selection
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(0x746f6c6c, 0x67617465))
	}
	s := &Scheduler{
		cfg:       cfg,
		prio:      cfg.Priority.Enabled,
		blockSize: cfg.BlockSize,
		sel:       sel,
		rnd:       cfg.Rand,
		origin:    cfg.Start,
		originSet: !cfg.Start.IsZero(),
		models:    make(map[string]*modelQueue),
		entries:   make(map[uint64]*entry),
		adm:       newAdmission(cfg.Admission, cfg.Priority.Enabled),
		budgets:   newBudgets(cfg.TenantBudgets, cfg.MaxBudgetScopes),
	}
	s.dispatchable = s.isDispatchable
	s.installWorkers(workers)
	s.capacity = workerCapacity(s.workers, cfg.FallbackCapacity)
	desired := s.desiredReservations(s.capacity)
	if s.prio {
		if err := s.reservationError(desired); err != nil {
			return nil, err
		}
	}
	s.reserved = desired
	s.warmPending = true
	return s, nil
}

// Submit classifies r, snapshots its cost, then dispatches it at once,
// queues it, or rejects it; a queued arrival is followed by a dispatch pass
// (settle), and when r is still queued after it, the call's last action is
// an ActionQueue for r. In order:
//
//  0. While draining (after Drain, until Resume) every arrival is rejected
//     with OutcomeShutdown, whether or not it could be dispatched at once.
//  1. A pin is resolved and validated; an invalid one is rejected at once
//     with OutcomePinInvalid and the upstream text.
//  2. The cost snapshot: cached = the pinned worker's hit, or the best hit
//     over the eligible workers, capped at ISL; cost = max(1, ISL − cached).
//     The policy class is resolved from r.Class and the uncached tokens.
//  3. With no eligible worker the request is rejected at once with
//     OutcomeNoEndpoints, unless its class has a busy threshold and a
//     backlog, in which case it joins the backlog (and is rejected when it
//     reaches the head).
//  4. Otherwise the arrival rule (mustQueue) decides between an immediate
//     dispatch and the queue; entry into the queue is subject to the limits
//     (join).
//  5. A queued arrival of a can_preempt class that found no free slot
//     preempts at most one victim.
//
// While the warm start holds the slot gate, step 4 queues without the
// limits and step 5 waits: both apply when the hold ends (warm.go).
//
// Upstream Dynamo does not drain the queue on an enqueue (a request that
// joined a backlog waits for the next load event); here every enqueue runs
// a dispatch pass, so a queued arrival that is dispatchable leaves at once.
//
// A request whose ID is already live is answered with an OutcomeUnknown
// rejection naming the duplicate; the live request is not affected.
func (s *Scheduler) Submit(now time.Time, r Request) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	if s.duplicate(&r) {
		return s.actions
	}
	e := s.newEntry(&r, t)
	if s.draining {
		s.rejectArrival(e, r.Model, "", OutcomeShutdown, "")
		return s.actions
	}
	if s.lateShed {
		s.pass(t)
	}
	s.wakeParked(t)
	if s.resumeGate(&r) || s.gate(e, &r, t) {
		s.arrive(e, &r, t, true)
	}
	return s.actions
}

// duplicate rejects r, with OutcomeUnknown naming the duplicate, when its
// ID is already live; the live request is not affected.
func (s *Scheduler) duplicate(r *Request) bool {
	if _, dup := s.entries[r.ID]; !dup {
		return false
	}
	s.actions = append(s.actions, Action{
		Kind: ActionReject, ID: r.ID, Outcome: OutcomeUnknown, Priority: r.Priority, Model: r.Model,
		Message: fmt.Sprintf("duplicate request id %d", r.ID),
	})
	return true
}

// arrive takes e past SMG's bucket into the policy classes: the tenant
// budgets, then Submit's steps 1 to 5. report asks for the ActionQueue of
// an arrival still queued at the end (a waiter leaving SMG's admission
// queue was reported queued already).
func (s *Scheduler) arrive(e *entry, r *Request, t instant, report bool) {
	if s.budgets != nil && !r.Resumed {
		res, wait, ok := s.budgets.reserve(t, r.Tenant, r.Model, r.ISL)
		if !ok {
			a := s.emitNamed(ActionReject, e, r.Model, "", OutcomeTenantRateLimited)
			a.RetryAfter = wait
			s.admits[e.prio][OutcomeTenantRateLimited]++
			s.recycle(e)
			return
		}
		e.budget = res
	}
	profile := s.cfg.Policy.ProfileFor(r.Model)

	var (
		fault    pinFault
		rankNo   uint32
		pinned   string
		eligible = true
	)
	if r.Pin != nil {
		pinned = r.Pin.Worker
		e.rank, rankNo, fault = s.resolvePin(e.need(), *r.Pin)
		if fault == pinOK {
			e.lane = laneKey{worker: pinned, rank: rankNo}
		}
	} else {
		eligible = s.anyEligible(e.need())
	}
	at := t
	if r.Resumed {
		at = e.enq // FCFS order by arrival
	}
	if !s.classify(e, r, profile, pinned, at) {
		s.rejectArrival(e, r.Model, "", OutcomeUnknownClass, "unknown router policy class")
		return
	}
	c := &profile.Classes[e.class]

	key := s.queueKey(r.Model)
	mq := s.models[key]
	backlog := c.Queues() && mq != nil && mq.ring.classLen(e.class) > 0
	switch {
	case fault != pinOK:
		s.rejectArrival(e, r.Model, c.Name, OutcomePinInvalid, s.pinMessage(pinned, rankNo, fault))
		return
	case !eligible && !backlog:
		s.rejectArrival(e, r.Model, c.Name, OutcomeNoEndpoints, s.noEndpointsMessage(e.need()))
		return
	}
	if mq == nil {
		mq = s.queueFor(key, profile)
	}
	e.mq = mq
	e.setDeadline()

	if eligible && !s.mustQueue(e) {
		s.admit(e, false, t)
		return
	}
	slotFull := s.prio && eligible && s.freeSlots(e.prio) == 0
	if s.join(e, t) {
		if !eligible {
			s.markUnservable(e, true)
		}
		// While the warm start holds the gate, no slot is known to be
		// missing yet: judgeWarm preempts at its end.
		if slotFull && !s.warming && s.cfg.Priority.Classes[e.prio].CanPreempt {
			s.preemptFor(e)
		}
		s.settle(e, t)
		if report && e.state == stateQueued {
			s.actions = append(s.actions, Action{
				Kind: ActionQueue, ID: e.id, Priority: e.prio, Model: e.model, PolicyClass: e.spec().Name,
			})
		}
	}
}

// settle is the dispatch pass after e was queued. Every call leaves no
// queued entry dispatchable (but see pass on entries without workers), and
// dispatching only adds load and takes slots, so an arrival can make only
// itself dispatchable, and only in its own queue: the pass pops that queue
// until e has left it or nothing yields. (After an immediate dispatch no
// pass is needed at all, for the same reason.) With fairness on, an
// arrival can also change which flow heads its lane, and the dispatch of e
// moves its flow's DRR turn, so the pass goes on until nothing yields.
func (s *Scheduler) settle(e *entry, t instant) {
	mq := e.mq
	for (e.state == stateQueued || s.cfg.Fairness.Enabled) && (!s.prio || s.passable()) {
		x := mq.ring.pop(s.dispatchable)
		if x == nil {
			return
		}
		s.unqueue(x, true)
		s.admit(x, true, t)
	}
}

// FirstToken releases the request's prefill tokens; it can no longer be
// preempted. A dispatch pass follows. IDs that are unknown, queued or
// already past their first token are ignored.
func (s *Scheduler) FirstToken(now time.Time, id uint64) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	e := s.entries[id]
	if e == nil || e.state != stateInFlight || e.flags&flagFirstToken != 0 {
		return s.actions
	}
	e.flags |= flagFirstToken
	s.unlistPreemptible(e)
	s.releasePrefill(e)
	s.recheckWorker(e.rank.key.worker)
	s.pass(t)
	return s.actions
}

// Release reports that the shell is finished with a request, whatever the
// reason (the client went away, the response ended, a preemption was
// answered). A queued request leaves its queue: the call reports it as an
// ActionReject with OutcomeClientCancelled, Queued and its Wait, which the
// shell only counts (nobody is left to answer). An in-flight one releases
// everything it booked. A dispatch pass follows. Unknown IDs are ignored.
//
// The slot an ending victim frees goes first to its preemptor, if that one
// is still queued and its gates pass; the preemptor then leaves its lane
// directly, without a DRR charge.
func (s *Scheduler) Release(now time.Time, id uint64) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	e := s.entries[id]
	switch {
	case e == nil:
		return s.actions
	case e.state == stateQueued:
		s.unqueue(e, false)
		s.finish(e, OutcomeClientCancelled, true, t)
		s.pass(t)
		return s.actions
	case e.state == stateParked:
		s.unpark(e)
		s.finish(e, OutcomeClientCancelled, true, t)
		return s.actions
	}
	preemptor := e.peer
	if preemptor != nil {
		preemptor.peer, e.peer = nil, nil
	}
	worker := e.rank.key.worker
	s.unbook(e)
	s.releaseSlot(e)
	s.recycle(e)
	s.recheckWorker(worker)
	if s.slotBlocked {
		s.slotBlocked = false
		s.recheckAll()
	}
	if preemptor != nil && s.dispatchable(preemptor) {
		s.unqueue(preemptor, false)
		s.admit(preemptor, true, t)
	}
	s.pass(t)
	return s.actions
}

// Tick expires queue timeouts and promotes starving requests whose
// deadlines are <= now, then runs a dispatch pass.
func (s *Scheduler) Tick(now time.Time) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	ended := s.endWarmIfDue(t)
	if s.prio {
		s.expire(t)
		if s.promoteStarving(t) {
			s.recheckAll()
		}
	}
	s.pass(t)
	if ended {
		s.judgeWarm(t)
		s.pass(t)
	}
	return s.actions
}

// SetWorkers replaces the worker set. Capacity and reservations follow it
// (the runtime clamp; it never fails). Queued requests whose pin is no
// longer valid, such as one pinned to a removed worker, are rejected with
// OutcomePinInvalid; in-flight bookings on removed workers stay until those
// requests end. Worker IDs are expected to be unique; later duplicates are
// ignored, and so is a worker with more than MaxDPSize ranks.
func (s *Scheduler) SetWorkers(now time.Time, workers []Worker) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	s.installWorkers(workers)
	if s.engineOn() && s.cfg.Engine.Capacity {
		s.applyEngineCapacity()
	}
	s.recountSeeds()
	s.applyCapacity(workerCapacity(s.workers, s.cfg.FallbackCapacity))
	for p := range s.wait {
		for e := s.wait[p].head; e != nil; {
			next := e.next
			if !e.lane.exact() {
				s.markUnservable(e, !s.anyEligible(e.need()))
			} else {
				pin := Pin{Worker: e.lane.worker, Rank: e.lane.rank, HasRank: true}
				r, _, fault := s.resolvePin(e.need(), pin)
				if fault == pinOK {
					e.rank = r
				} else {
					msg := s.pinMessage(pin.Worker, pin.Rank, fault)
					s.unqueue(e, false)
					s.finish(e, OutcomePinInvalid, true, t).Message = msg
				}
			}
			e = next
		}
	}
	s.recheckAll()
	s.dispatchLoop(t, false)
	return s.actions
}

// Drain rejects every queued request with OutcomeShutdown, the higher
// priority classes first and each in enqueue order. From then on, until
// Resume, Submit rejects every arrival with OutcomeShutdown, whether or not
// it could be dispatched at once; requests in flight run to their Release.
func (s *Scheduler) Drain(now time.Time) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	s.draining = true
	for p := NumPriorities - 1; p >= 0; p-- {
		for e := s.wait[p].head; e != nil; e = s.wait[p].head {
			s.unqueue(e, false)
			s.finish(e, OutcomeShutdown, true, t)
		}
	}
	s.shedParked(OutcomeShutdown, t)
	return s.actions
}

// Resume ends a Drain: arrivals are admitted again. Leader election uses it
// when a standby becomes the leader.
// With the warm start on, it also starts a new warm start at the next
// call: the new leader's bookings are empty while the engines are not.
func (s *Scheduler) Resume() {
	s.draining = false
	s.warmPending = true
}

// NextDeadline returns the earliest time at which Tick has work (a queue
// timeout or a starvation promotion), and false when there is none.
func (s *Scheduler) NextDeadline() (time.Time, bool) {
	d, ok := s.nextDeadline()
	if !ok {
		return time.Time{}, false
	}
	return s.origin.Add(d), true
}

// pass is the dispatch pass: one DRR pop per queue with entries, round-robin
// across models, until no queue yields an entry. Each popped entry is
// admitted (or, with no eligible worker left, rejected). Dispatching only
// adds load and takes slots, so a queue that yielded nothing stays empty-
// handed for the rest of the pass.
//
// With the priority scheduler on, the pass stops (or does not start) as
// soon as no queued entry can pass (passable): an arbitration that cannot
// succeed would only cost time and drop the DRR carry of the last winner,
// which would flatten the class weights whenever the slot pool is the
// bottleneck. A queued entry with no eligible worker needs no slot: while
// there is one, the pass goes on with the slot gate closed, so such an
// entry is rejected as soon as it heads its lane instead of waiting for a
// free slot or its queue timeout.
func (s *Scheduler) pass(t instant) { s.dispatchLoop(t, s.prio) }

// passable reports whether a pass can dispatch or reject a queued entry:
// the slot gate can pass one, or one has no eligible worker.
func (s *Scheduler) passable() bool { return s.unservable > 0 || s.slotsForQueued() }

// markUnservable sets or clears e's flagUnservable and keeps
// s.unservable in step.
func (s *Scheduler) markUnservable(e *entry, on bool) {
	switch was := e.flags&flagUnservable != 0; {
	case on && !was:
		e.flags |= flagUnservable
		s.unservable++
	case !on && was:
		e.flags &^= flagUnservable
		s.unservable--
	}
}

// dispatchLoop implements pass; slotCheck enables the early stop. SMG's
// admission waiters get the free tokens after it: queued requests, which
// passed SMG's gate earlier, are served first.
func (s *Scheduler) dispatchLoop(t instant, slotCheck bool) {
	defer s.wakeParked(t)
	for idle := 0; idle < len(s.active); {
		if slotCheck && !s.passable() {
			return
		}
		if s.rr >= len(s.active) {
			s.rr = 0
		}
		mq := s.active[s.rr]
		s.rr++
		e := mq.ring.pop(s.dispatchable)
		if e == nil {
			idle++
			continue
		}
		idle = 0
		s.unqueue(e, true)
		s.admit(e, true, t)
	}
}

// isDispatchable is the predicate the rings test lane heads with: the
// worker gate and the slot gate both pass, or no worker is eligible at all
// (the entry is then dispatched into its rejection instead of waiting
// forever; it needs no slot).
func (s *Scheduler) isDispatchable(e *entry) bool {
	open, eligible := s.workerGate(e)
	switch {
	case !eligible:
		return true
	case !open:
		return false
	case s.slotOpen(e):
		return true
	}
	if e.lane.exact() {
		s.slotBlocked = true
	}
	return false
}

// admit dispatches e: it selects the rank, books the load and the slot, and
// emits ActionDispatch. With no eligible rank it rejects e with
// OutcomeNoEndpoints instead.
func (s *Scheduler) admit(e *entry, queued bool, t instant) {
	r := s.choose(e)
	if r == nil {
		msg := s.noEndpointsMessage(e.need())
		s.finish(e, OutcomeNoEndpoints, queued, t).Message = msg
		return
	}
	e.prank = s.splitFor(e, r)
	s.book(e, r)
	s.takeSlot(e)
	e.state = stateInFlight
	s.admits[e.prio][OutcomeAdmitted]++
	if e.promoted {
		s.promotions[e.prio]++
	}
	a := s.emit(ActionDispatch, e, OutcomeAdmitted)
	a.Worker, a.Rank = r.key.worker, r.key.rank
	if p := e.prank; p != nil {
		a.Prefill = RankRef{Worker: p.key.worker, Rank: p.key.rank}
		s.splitCount++
	}
	a.Preemptible = s.canBeVictim(e.prio)
	if s.cfg.Fallbacks > 0 && !e.lane.exact() {
		a.Fallbacks = s.fallbacks(e, r)
	}
	if queued {
		a.Queued, a.Wait = true, t-e.enq
	}
}

// canBeVictim reports whether a dispatch of class p can be chosen as a
// victim: priority admission is on and some class above p may preempt.
func (s *Scheduler) canBeVictim(p Priority) bool {
	if !s.cfg.Priority.Enabled {
		return false
	}
	for by := p + 1; by < NumPriorities; by++ {
		if s.cfg.Priority.Classes[by].CanPreempt {
			return true
		}
	}
	return false
}

// finish rejects the queued or arriving e with outcome, counts it and
// recycles e. It returns the action for the caller to complete; the pointer
// is valid until the next action is appended.
func (s *Scheduler) finish(e *entry, o Outcome, queued bool, t instant) *Action {
	a := s.emit(ActionReject, e, o)
	if queued {
		a.Queued, a.Wait = true, t-e.enq
	}
	s.admits[e.prio][o]++
	s.recycle(e)
	return a
}

// rejectArrival rejects an arrival that has no queue yet.
func (s *Scheduler) rejectArrival(e *entry, model, class string, o Outcome, msg string) {
	a := s.emitNamed(ActionReject, e, model, class, o)
	a.Message = msg
	s.admits[e.prio][o]++
	s.recycle(e)
}

// emit appends an action about e and returns it for the caller to finish.
func (s *Scheduler) emit(kind ActionKind, e *entry, o Outcome) *Action {
	class := ""
	if e.mq != nil {
		class = e.spec().Name
	}
	return s.emitNamed(kind, e, e.model, class, o)
}

// emitNamed is emit with the queue's names given (the class is empty for
// a request not classified yet).
func (s *Scheduler) emitNamed(kind ActionKind, e *entry, model, class string, o Outcome) *Action {
	s.actions = append(s.actions, Action{
		Kind:        kind,
		ID:          e.id,
		Outcome:     o,
		Priority:    e.prio,
		Model:       model,
		PolicyClass: class,
		ISL:         e.isl,
		Cached:      e.cached,
		Uncached:    e.isl - e.cached,
	})
	a := &s.actions[len(s.actions)-1]
	if e.flags&flagWaited != 0 {
		a.Queued, a.Wait = true, s.now-e.enq
	}
	return a
}

// classify takes e's cost snapshot and queue key: cached = the pinned
// worker's hit (pinned names it) or the best hit over the eligible workers,
// capped at ISL; cost = max(1, ISL − cached); the policy class from the
// requested class and the uncached tokens; the FCFS score max(0, jump) −
// seconds since the origin, the WSPT score (1 + max(0, jump)) / cost, or
// the EDF score −(arrival + SLO), under which the strict-priority hint does
// not count. It reports false when a flat profile has no class of the
// requested name.
func (s *Scheduler) classify(e *entry, r *Request, profile *Profile, pinned string, t instant) bool {
	e.cached = min(s.snapshotCached(e, r.Model, pinned), e.isl)
	uncached := e.isl - e.cached
	e.cost = max(1, uncached)
	if e.class = profile.Resolve(r.Class, uncached); e.class < 0 {
		return false
	}
	jump := r.PriorityJump
	if !(jump > 0) { // also NaN
		jump = 0
	}
	c := &profile.Classes[e.class]
	switch c.QueuePolicy {
	case WSPT:
		e.score = (1 + jump) / float64(e.cost)
	case EDF:
		e.strict = strictKey(e.prio, 0, false)
		e.score = -addSat(e.arrival, c.SLO).Seconds()
	case FCFS:
		e.score = jump - max(0, t.Seconds())
	}
	return true
}

// newEntry takes an entry from the pool and fills it from r. An out-of-range
// Priority is taken as PriorityDefault.
func (s *Scheduler) newEntry(r *Request, t instant) *entry {
	e := s.pool
	if e != nil {
		s.pool = e.next
		e.next = nil
	} else {
		e = new(entry)
	}
	e.id = r.ID
	e.model = r.Model
	e.flowKey = r.FairnessKey
	e.prio = r.Priority
	if e.prio >= NumPriorities {
		e.prio = PriorityDefault
	}
	e.strict = strictKey(e.prio, r.StrictPriority, r.HasStrictPriority)
	e.isl = r.ISL
	e.enq = t
	e.arrival = t
	if !r.Arrival.IsZero() {
		e.arrival = r.Arrival.Sub(s.origin)
		if r.Resumed && e.arrival < t {
			e.enq = e.arrival // its wait counts from its arrival
		}
	}
	e.dpos = -1
	e.taints = append(e.taints[:0], r.RequiredTaints...)
	e.allowed = append(e.allowed[:0], r.AllowedWorkers...)
	e.cachedTokens = append(e.cachedTokens[:0], r.Cached...)
	s.entries[r.ID] = e
	return e
}

// maxPooledEntryBuf bounds the taint and cache-hit buffers a pooled entry
// keeps: enough for large fleets without retaining a past burst of huge
// request lists.
const maxPooledEntryBuf = 1024

// recycle forgets e and returns it to the pool, keeping its buffers unless
// they are larger than maxPooledEntryBuf.
func (s *Scheduler) recycle(e *entry) {
	s.returnToken(e)
	delete(s.entries, e.id)
	clear(e.taints)
	clear(e.allowed)
	taints, allowed, cached := e.taints[:0], e.allowed[:0], e.cachedTokens[:0]
	clear(cached[:cap(cached)])
	if cap(taints) > maxPooledEntryBuf {
		taints = nil
	}
	if cap(allowed) > maxPooledEntryBuf {
		allowed = nil
	}
	if cap(cached) > maxPooledEntryBuf {
		cached = nil
	}
	*e = entry{taints: taints, allowed: allowed, cachedTokens: cached, next: s.pool}
	s.pool = e
}
