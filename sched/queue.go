package sched

// This file holds the per-model queues, the arrival rule and the limits on
// entry into a queue.

// modelQueue is the queue of one model name that the policy file or a
// worker names, or the shared queue of the empty name: a DRR ring over the
// policy classes of the model's profile, plus the per-class counters the
// ring does not keep. Created on the first request for it and kept for the
// scheduler's life. Their number is bounded by the names the operator
// configured (see queueKey).
type modelQueue struct {
	name    string
	profile *Profile
	ring    *ring
	// active is the queue's index in Scheduler.active while it has queued
	// entries, else -1.
	active int
	// queued counts queued entries per policy class and priority class.
	queued [][NumPriorities]uint32
	// backpressure counts limit rejections per policy class and LimitKind.
	backpressure [][NumLimitKinds]uint64
	// expired counts deadline sheds per policy class and stage.
	expired [][NumDeadlineStages]uint64
}

// queueKey returns the key of model's queue: the name itself when the
// policy file or a current worker names it (or its queue exists), else the
// empty name. Workers without a model serve every name a client sends, so
// a name only a client chose shares the empty name's queue: it never adds a
// queue or a metric series. Such a name has no profile of its own, so the
// empty name's profile (the root or fallback) is its profile too; its
// entries keep their own model for eligibility, limits and actions, and
// the shared queue's metrics say model "".
func (s *Scheduler) queueKey(model string) string {
	if _, ok := s.models[model]; ok {
		return model
	}
	if _, ok := s.cfg.Policy.Models[model]; ok {
		return model
	}
	for _, w := range s.workers {
		if w.model == model {
			return model
		}
	}
	return ""
}

// queueFor returns model's queue, creating it with profile.
func (s *Scheduler) queueFor(model string, profile *Profile) *modelQueue {
	if mq := s.models[model]; mq != nil {
		return mq
	}
	n := len(profile.Classes)
	mq := &modelQueue{
		name:         model,
		profile:      profile,
		ring:         newRing(profile.Classes),
		active:       -1,
		queued:       make([][NumPriorities]uint32, n),
		backpressure: make([][NumLimitKinds]uint64, n),
		expired:      make([][NumDeadlineStages]uint64, n),
	}
	mq.ring.enableFairness(&s.cfg.Fairness)
	s.models[model] = mq
	s.order = append(s.order, mq)
	return mq
}

// spec returns the policy class e was classified into.
func (e *entry) spec() *ClassSpec { return &e.mq.profile.Classes[e.class] }

// queuedAtOrAbove counts the entries queued in policy class c with priority
// p or higher.
func (mq *modelQueue) queuedAtOrAbove(c int, p Priority) uint32 {
	var n uint32
	for ; p < NumPriorities; p++ {
		n += mq.queued[c][p]
	}
	return n
}

// mustQueue applies the arrival rule to an arrival with an eligible worker.
// It queues when either gate says so:
//
//   - the worker gate (Dynamo), only for a class with a busy threshold: the
//     class already has queued entries in any lane (an arrival never
//     bypasses a backlog), or the arrival's worker gate is closed;
//   - the slot gate (SMG), with the priority scheduler on, for every class:
//     an entry of the same or a higher priority class is already queued in
//     the same policy class (no barging: a new arrival never overtakes
//     queued work that would be served before it), or free(its class) is 0.
//
// Otherwise the arrival is dispatched at once.
func (s *Scheduler) mustQueue(e *entry) bool {
	if c := e.spec(); c.Queues() {
		if e.mq.ring.classLen(e.class) > 0 {
			return true
		}
		if open, _ := s.workerGate(e); !open {
			return true
		}
	}
	return s.prio && (e.mq.queuedAtOrAbove(e.class, e.prio) > 0 || s.freeSlots(e.prio) == 0)
}

// join puts e into its queue, unless a limit on entry rejects it. The
// checks run in this order, the first failure answering:
//
//  1. a flat policy class's deadline: a request already past it is shed
//     (OutcomeDeadlineExceeded at the admission stage), as Dynamo checks
//     it just before a request enters queue storage;
//  2. SMG queue_size (priority scheduler on): the requests of e's priority
//     class queued across all models and policy classes >= queue_size:
//     OutcomeQueueFull. SMG's admission is the outer layer, so it answers
//     first, as it would in front of a Dynamo router;
//  3. Dynamo's per-worker limits of e's policy class, requests then raw ISL
//     tokens then cached tokens: usage before adding e >= per-worker limit ×
//     worker instances serving the model (saturating): OutcomeClassLimit,
//     counted in the queue's backpressure. The request that crosses a token
//     limit is therefore accepted, and a limit of 0 rejects every request
//     that has to queue.
//
// Limits apply to every request that enters a queue, whichever gate made it
// queue, except while the warm start holds the slot gate: the limits then
// wait for its end (joinWarm). Draining is not checked here: while
// draining, Submit rejects every arrival before it gets this far. It
// reports whether e was queued.
func (s *Scheduler) join(e *entry, t instant) bool {
	if e.late(t) {
		s.shed(e, StageAdmission, false, t)
		return false
	}
	if s.prio && s.warming {
		return s.joinWarm(e, t)
	}
	if s.prio && s.wait[e.prio].n >= s.cfg.Priority.Classes[e.prio].QueueSize {
		s.finish(e, OutcomeQueueFull, false, t)
		return false
	}
	if kind, current, limit := s.overLimit(e); kind != LimitNone {
		e.mq.backpressure[e.class][kind]++
		a := s.finish(e, OutcomeClassLimit, false, t)
		a.LimitKind, a.LimitCurrent, a.LimitValue = kind, current, limit
		return false
	}
	s.enqueue(e, t)
	return true
}

// classUsage is what the per-worker limits of a policy class count: its
// queued requests and the sums of their raw ISL and cached tokens.
type classUsage struct{ requests, isl, cached uint64 }

// hasLimits reports whether c has a per-worker limit.
func hasLimits(c *ClassSpec) bool {
	return c.RequestLimitPerWorker != nil || c.RawISLLimitPerWorker != nil || c.CachedTokenLimitPerWorker != nil
}

// overLimit returns the first per-worker limit of e's policy class that its
// queue has reached, with the usage and the effective limit.
func (s *Scheduler) overLimit(e *entry) (LimitKind, uint64, uint64) {
	if !hasLimits(e.spec()) {
		return LimitNone, 0, 0
	}
	requests, isl, cached := e.mq.ring.classStats(e.class)
	return s.limitReached(e, classUsage{requests, isl, cached})
}

// limitReached is overLimit for the usage u of e's policy class.
func (s *Scheduler) limitReached(e *entry, u classUsage) (LimitKind, uint64, uint64) {
	c := e.spec()
	if !hasLimits(c) {
		return LimitNone, 0, 0
	}
	workers := s.instances(e.model)
	for _, l := range [...]struct {
		kind      LimitKind
		perWorker *uint64
		current   uint64
	}{
		{LimitRequests, c.RequestLimitPerWorker, u.requests},
		{LimitRawISLTokens, c.RawISLLimitPerWorker, u.isl},
		{LimitCachedTokens, c.CachedTokenLimitPerWorker, u.cached},
	} {
		if l.perWorker == nil {
			continue
		}
		if limit := satMul(*l.perWorker, workers); l.current >= limit {
			return l.kind, l.current, limit
		}
	}
	return LimitNone, 0, 0
}

// enqueue pushes e into its ring and wait list. Its wait counts from its
// Submit (e.enq), through an SMG admission wait if it had one.
func (s *Scheduler) enqueue(e *entry, t instant) {
	mq := e.mq
	e.state = stateQueued
	e.seq = s.seq
	s.seq++
	mq.ring.push(e)
	if s.prio && e.lane.exact() {
		// A new head of an exact lane blocked by the slot gate may pass it.
		mq.ring.retest(e)
	}
	if mq.active < 0 {
		mq.active = len(s.active)
		s.active = append(s.active, mq)
	}
	mq.queued[e.class][e.prio]++
	if s.wait[e.prio].insert(e) {
		e.promoted = true
		mq.ring.fix(e)
	}
	s.queuedTotal++
	s.watchDeadline(e)
}

// unqueue takes the queued e out of every queue structure. popped says the
// ring already removed it (a DRR pop). A preemptor leaving the queue drops
// its claim on its victim's slot.
func (s *Scheduler) unqueue(e *entry, popped bool) {
	mq := e.mq
	if !popped {
		mq.ring.remove(e)
	}
	if mq.ring.len() == 0 {
		s.deactivate(mq)
	}
	mq.queued[e.class][e.prio]--
	s.wait[e.prio].remove(e)
	s.queuedTotal--
	s.unwatchDeadline(e)
	s.markUnservable(e, false)
	e.flags &^= flagWarm
	if v := e.peer; v != nil {
		v.peer, e.peer = nil, nil
	}
	e.state = stateNone
}

// deactivate takes the emptied mq off the active list.
func (s *Scheduler) deactivate(mq *modelQueue) {
	i := mq.active
	if i < 0 {
		return
	}
	last := len(s.active) - 1
	if m := s.active[last]; m != mq {
		s.active[i] = m
		m.active = i
	}
	s.active[last] = nil
	s.active = s.active[:last]
	mq.active = -1
}

// recheckWorker releases, in every queue with entries, the exact lanes of
// worker that were blocked: its load fell.
func (s *Scheduler) recheckWorker(worker string) {
	for _, mq := range s.active {
		mq.ring.recheckWorker(worker)
	}
}

// recheckAll releases every blocked exact lane of every queue: the slot
// picture or the worker set changed.
func (s *Scheduler) recheckAll() {
	for _, mq := range s.active {
		mq.ring.recheckAll()
	}
}
