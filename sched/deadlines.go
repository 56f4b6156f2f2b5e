package sched

import (
	"math"
	"time"
)

// This file holds queue timeouts and starvation promotion.
//
// Every queued entry sits on the wait list of its priority class, in
// enqueue order. A class's queue timeout and starvation threshold are
// constant, so the oldest entry of each list is the first to time out and
// the first to starve: the head of a list carries the class's next timeout
// and a cursor (the first entry not yet promoted) carries its next
// promotion. NextDeadline is therefore O(classes) and Tick touches only
// entries that are due. Nothing polls.
//
// Deadlines apply only with the priority scheduler enabled. A zero
// QueueTimeout or StarvationThreshold disables that deadline for its class
// (policy validation rejects zeros; the scheduler does not rely on it).

// instant is a point in time as an offset from the scheduler's origin: the
// configured Start, or the first now seen when Start is zero.
type instant = time.Duration

// waitList is a priority class's wait list with its promotion cursor.
type waitList struct {
	entryList
	// promo is the first entry not yet promoted; every entry before it is.
	promo *entry
}

// push appends the newly queued (unpromoted) e.
func (w *waitList) push(e *entry) {
	w.pushBack(e)
	if w.promo == nil {
		w.promo = e
	}
}

// insert links the newly queued, unpromoted e in enqueue-time order:
// after every entry queued at or before e.enq. Only a resumed request
// (Request.Resumed) is older than the tail. It reports whether e landed
// among promoted entries: it is older than one of them, so it starves too
// and the caller promotes it. Landing just before the cursor, it becomes
// the cursor.
func (w *waitList) insert(e *entry) (starving bool) {
	at := w.tail
	for at != nil && at.enq > e.enq {
		at = at.prev
	}
	if at == w.tail {
		w.push(e)
		return false
	}
	if at == nil {
		e.prev, e.next = nil, w.head
		w.head.prev = e
		w.head = e
	} else {
		e.prev, e.next = at, at.next
		at.next.prev = e
		at.next = e
	}
	w.n++
	if e.next == w.promo {
		w.promo = e
		return false
	}
	return e.next.promoted
}

// remove unlinks e.
func (w *waitList) remove(e *entry) {
	if w.promo == e {
		w.promo = e.next
	}
	w.entryList.remove(e)
}

// at converts now to an instant, fixing the origin on first use when the
// configuration gave no Start, and begins the call: SMG admission waiters
// that waited too long and flat-class requests past their deadline are
// rejected before anything else, so no call serves them. A call that runs
// no dispatch pass of its own runs one when at shed a queued request
// (s.shed), since that can release a lane.
func (s *Scheduler) at(now time.Time) instant {
	if !s.originSet {
		s.origin, s.originSet = now, true
	}
	s.now = now.Sub(s.origin)
	if s.warmPending {
		s.warmPending = false
		s.startWarm(s.now)
	}
	s.expireParked(s.now)
	s.lateShed = s.shedLate(s.now)
	return s.now
}

// expire rejects every queued entry whose wait reached its class's queue
// timeout, oldest first within each class.
func (s *Scheduler) expire(t instant) {
	for p := range Priority(NumPriorities) {
		timeout := s.cfg.Priority.Classes[p].QueueTimeout
		if timeout <= 0 {
			continue
		}
		w := &s.wait[p]
		for e := w.head; e != nil && t-e.enq >= timeout; e = w.head {
			s.unqueue(e, false)
			s.finish(e, OutcomeQueueTimeout, true, t)
		}
	}
}

// promoteStarving promotes every queued bulk, default and interactive entry
// that has waited strictly longer than its class's starvation threshold:
// the entry sorts above every tier in its lane and its slot gate ignores
// reservations. It reports whether it promoted anything. A promotion is
// counted when the promoted entry is admitted (admit), as upstream counts
// only a starving head that got its slot.
func (s *Scheduler) promoteStarving(t instant) bool {
	promoted := false
	for p := range PrioritySystem {
		threshold := s.cfg.Priority.Classes[p].StarvationThreshold
		if threshold <= 0 {
			continue
		}
		w := &s.wait[p]
		for e := w.promo; e != nil && t-e.enq > threshold; e = w.promo {
			w.promo = e.next
			e.promoted = true
			e.mq.ring.fix(e)
			promoted = true
		}
	}
	return promoted
}

// nextDeadline returns the earliest instant at which expire or
// promoteStarving has work. A promotion is due one nanosecond after the
// threshold, since the wait must be strictly longer.
func (s *Scheduler) nextDeadline() (instant, bool) {
	next, ok := instant(math.MaxInt64), false
	for _, f := range [...]func() (instant, bool){s.nextLate, s.nextAdmission} {
		if at, due := f(); due {
			next, ok = min(next, at), true
		}
	}
	if !s.prio {
		return next, ok
	}
	if s.warming {
		next, ok = s.warmUntil, true
	}
	for p := range Priority(NumPriorities) {
		c := &s.cfg.Priority.Classes[p]
		w := &s.wait[p]
		if e := w.head; e != nil && c.QueueTimeout > 0 {
			next, ok = min(next, addSat(e.enq, c.QueueTimeout)), true
		}
		if e := w.promo; e != nil && p != PrioritySystem && c.StarvationThreshold > 0 {
			next, ok = min(next, addSat(addSat(e.enq, c.StarvationThreshold), 1)), true
		}
	}
	return next, ok
}

// addSat adds two instants, saturating at the largest one.
func addSat(a, b instant) instant {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
