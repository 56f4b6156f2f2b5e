package sched

// This file holds SMG's request bucket (Config.Admission), the outer layer
// in front of the policy classes:
//
//   - with priority admission on, the rate check: an arrival takes one
//     token or is rejected with OutcomeRateLimited; tokens are never given
//     back, so Capacity is the burst and RatePerSecond the sustained rate;
//   - without it, the legacy admission: an arrival takes one token and
//     holds it until it ends (released, rejected, shed), and RatePerSecond
//     also refills the bucket. An arrival that finds no token waits, parked
//     in arrival order, for at most QueueTimeout (OutcomeAdmissionTimeout);
//     with QueueSize waiting already, or QueueSize 0, it is rejected with
//     OutcomeAdmissionFull. A freed or refilled token goes to the oldest
//     waiter, and no arrival overtakes a waiter. A waiter that gets its
//     token goes on as an arrival of that moment (arrive).
//
// SMG's waiters poll the bucket when it refills, so there they are not
// served in order; here they always are.

// admission is the bucket and its waiters.
type admission struct {
	on     bool // a bucket exists
	legacy bool // tokens are held until the request ends
	bucket bucket
	// parked lists the waiters in arrival order (through prev and next).
	parked  entryList
	holding uint32
	stats   AdmissionStats
}

// AdmissionStats counts SMG's bucket decisions (smg_http_rate_limit_total,
// smg_admission_queue_rejected_total, smg_admission_queue_depth,
// smg_admission_inflight).
type AdmissionStats struct {
	// Allowed and Rejected count the requests that got a token and those
	// refused for want of one.
	Allowed, Rejected uint64
	// Full and TimedOut count the legacy rejections of a full queue and of
	// a wait that timed out.
	Full, TimedOut uint64
	// Waiting is the legacy waiters; Holding the requests holding a token.
	Waiting, Holding uint32
}

// newAdmission builds the bucket cfg and the scheduler's mode call for.
func newAdmission(cfg AdmissionConfig, prio bool) admission {
	a := admission{legacy: !prio}
	a.on = cfg.Capacity > 0 && (!prio || cfg.RatePerSecond > 0)
	a.bucket = newBucket(float64(cfg.Capacity), float64(cfg.RatePerSecond), 0)
	return a
}

// gate runs the bucket for the arrival e. It reports whether e goes on to
// the policy classes; otherwise e was rejected or parked.
func (s *Scheduler) gate(e *entry, r *Request, t instant) bool {
	a := &s.adm
	if !a.on {
		return true
	}
	if a.parked.n == 0 && a.bucket.take(t, 1) {
		s.holdToken(e)
		return true
	}
	if !a.legacy {
		a.stats.Rejected++
		s.rejectArrival(e, r.Model, "", OutcomeRateLimited, "")
		return false
	}
	var msg string
	switch {
	case s.cfg.Admission.QueueSize == 0:
		msg = "concurrency limit reached and queuing is disabled"
	case a.parked.n >= s.cfg.Admission.QueueSize:
		msg = "admission queue is at capacity"
		a.stats.Full++
	default:
		s.park(e, r)
		return false
	}
	a.stats.Rejected++
	s.rejectArrival(e, r.Model, "", OutcomeAdmissionFull, msg)
	return false
}

// holdToken counts e's token; a legacy token is held until e ends.
func (s *Scheduler) holdToken(e *entry) {
	s.adm.stats.Allowed++
	if s.adm.legacy {
		e.flags |= flagToken
		s.adm.holding++
	}
}

// returnToken gives back the token e holds, if any.
func (s *Scheduler) returnToken(e *entry) {
	if e.flags&flagToken == 0 {
		return
	}
	e.flags &^= flagToken
	s.adm.holding--
	s.adm.bucket.give(s.now, 1)
}

// park makes e a waiter, with its own copy of r, and reports it queued.
func (s *Scheduler) park(e *entry, r *Request) {
	p := *r
	p.Cached, p.RequiredTaints, p.AllowedWorkers = nil, nil, nil // the entry has its copies
	if r.Pin != nil {
		pin := *r.Pin
		p.Pin = &pin
	}
	e.park = &p
	e.state = stateParked
	s.adm.parked.pushBack(e)
	s.actions = append(s.actions, Action{Kind: ActionQueue, ID: e.id, Priority: e.prio, Model: e.model})
}

// unpark takes the waiter e out of the queue and returns its request.
func (s *Scheduler) unpark(e *entry) *Request {
	s.adm.parked.remove(e)
	r := e.park
	e.park = nil
	e.state = stateNone
	e.flags |= flagWaited
	return r
}

// wakeParked gives free tokens to the waiters, oldest first; each goes on
// as an arrival. Nothing wakes while draining.
func (s *Scheduler) wakeParked(t instant) {
	a := &s.adm
	for a.parked.n > 0 && !s.draining && a.bucket.take(t, 1) {
		e := a.parked.head
		r := s.unpark(e)
		s.holdToken(e)
		s.arrive(e, r, t, false)
	}
}

// expireParked rejects the waiters that waited QueueTimeout, oldest first.
func (s *Scheduler) expireParked(t instant) {
	a := &s.adm
	timeout := s.cfg.Admission.QueueTimeout
	for e := a.parked.head; e != nil && timeout > 0 && t-e.enq >= timeout; e = a.parked.head {
		s.unpark(e)
		a.stats.Rejected++
		a.stats.TimedOut++
		s.finish(e, OutcomeAdmissionTimeout, true, t)
	}
}

// nextAdmission returns the first instant at which a waiter times out or
// a refill frees a token for one.
func (s *Scheduler) nextAdmission() (instant, bool) {
	a := &s.adm
	e := a.parked.head
	if e == nil {
		return 0, false
	}
	next, ok := instant(0), false
	if timeout := s.cfg.Admission.QueueTimeout; timeout > 0 {
		next, ok = addSat(e.enq, timeout), true
	}
	if d, can := a.bucket.wait(s.now, 1); can {
		at := addSat(max(s.now, a.bucket.last), d)
		if !ok || at < next {
			next, ok = at, true
		}
	}
	return next, ok
}

// shedParked rejects every waiter with outcome o (draining).
func (s *Scheduler) shedParked(o Outcome, t instant) {
	for e := s.adm.parked.head; e != nil; e = s.adm.parked.head {
		s.unpark(e)
		s.finish(e, o, true, t)
	}
}
