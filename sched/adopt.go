package sched

import "time"

// This file rebuilds a scheduler's state after a change of scheduler. The
// requests belong to the fronts that hold their streams; a new scheduler
// starts empty and each front re-registers what it holds: its queued
// requests through Submit with Request.Resumed set, its in-flight ones
// through Adopt. DRR deficits, fairness flows' service and the SMG
// buckets start afresh.

// resumeGate lets a resumed request past SMG's request bucket with the
// priority scheduler: its token was taken by the earlier scheduler and is
// never returned. With the legacy admission the request meets the gate
// again, since its token (if it had one) was the earlier scheduler's.
func (s *Scheduler) resumeGate(r *Request) bool {
	return r.Resumed && !s.adm.legacy
}

// Adopt books a request another scheduler dispatched and that is still in
// flight: its front re-registered it after a change of scheduler. It
// takes the request's cost snapshot on b's worker, books its load on b's
// rank (its prefill on b.Prefill for a split request), takes its slot even
// past the capacity (the request runs whatever the pool says) and, with
// SMG's legacy admission, a token (the bucket may go into debt). With
// b.FirstToken its prefill is done and it cannot be preempted. The tenant
// budgets are not charged again.
//
// Adopt dispatches nothing: added load only closes gates. Its actions are
// the shedding every call does first, and Submit's duplicate-ID rejection.
// A booking on a worker or rank outside the set is not adopted; the
// request's later events are ignored like those of any unknown ID.
func (s *Scheduler) Adopt(now time.Time, r Request, b Booking) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	if s.lateShed {
		s.pass(t)
	}
	if s.duplicate(&r) {
		return s.actions
	}
	rk := s.rankAt(b.Worker, b.Rank)
	if rk == nil {
		return s.actions
	}
	e := s.newEntry(&r, t)
	profile := s.cfg.Policy.ProfileFor(r.Model)
	if s.classify(e, &r, profile, b.Worker, e.arrival) {
		key := s.queueKey(r.Model)
		if e.mq = s.models[key]; e.mq == nil {
			e.mq = s.queueFor(key, profile)
		}
	}
	if b.Prefill.Worker != "" {
		e.prank = s.rankAt(b.Prefill.Worker, b.Prefill.Rank)
	}
	s.book(e, rk)
	s.takeSlot(e)
	e.state = stateInFlight
	if s.adm.on && s.adm.legacy {
		s.adm.bucket.give(t, -1)
		e.flags |= flagToken
		s.adm.holding++
	}
	if b.FirstToken {
		e.flags |= flagFirstToken
		s.unlistPreemptible(e)
		s.releasePrefill(e)
	}
	return s.actions
}

// rankAt returns the rank of a worker of the set, nil when there is none.
func (s *Scheduler) rankAt(worker string, rank uint32) *rankState {
	w := s.byID[worker]
	if w == nil || rank < w.dpStart || uint64(rank-w.dpStart) >= uint64(len(w.ranks)) {
		return nil
	}
	return w.ranks[rank-w.dpStart]
}
