package sched

import "time"

// This file holds the deadlines of flat policy classes (Dynamo's class
// SLOs). A request of a class with an SLO has the deadline arrival + SLO,
// computed once. Every queued request with a deadline sits in one heap
// ordered by (deadline, enqueue sequence); at the start of every call the
// requests whose deadline has passed (strictly) are shed before anything
// else happens, so a late request is never dispatched, and NextDeadline
// names the next one, so the shell's timer sheds it at its deadline.
// Removing a request from its lane neither charges its class's deficit nor
// moves the DRR cursor: shedding spends none of a class's share.

// deadlineItem is an entry as an element of the deadline heap.
type deadlineItem entry

// before orders the deadline heap: earlier deadline, then lower sequence.
func (d *deadlineItem) before(o *deadlineItem) bool {
	if d.deadline != o.deadline {
		return d.deadline < o.deadline
	}
	return d.seq < o.seq
}

// setPos records the entry's index in the deadline heap.
func (d *deadlineItem) setPos(i int) { d.dpos = i }

// late reports whether e, about to be queued, is already past its class's
// deadline.
func (e *entry) late(t instant) bool { return e.spec().SLO > 0 && t > e.deadline }

// setDeadline fixes e's deadline from its arrival and class.
func (e *entry) setDeadline() {
	if slo := e.spec().SLO; slo > 0 {
		e.deadline = addSat(e.arrival, slo)
	}
}

// watchDeadline adds the queued e to the deadline heap if its class has
// an SLO.
func (s *Scheduler) watchDeadline(e *entry) {
	if e.spec().SLO > 0 {
		s.deadlines.push((*deadlineItem)(e))
	}
}

// unwatchDeadline takes e out of the deadline heap, if it is there.
func (s *Scheduler) unwatchDeadline(e *entry) {
	if e.dpos >= 0 {
		s.deadlines.removeAt(e.dpos)
	}
}

// shedLate sheds every queued request whose deadline is before t, earliest
// first, at the dispatch stage, and reports whether it shed any.
func (s *Scheduler) shedLate(t instant) bool {
	shed := false
	for len(s.deadlines) > 0 {
		e := (*entry)(s.deadlines[0])
		if t <= e.deadline {
			break
		}
		s.unqueue(e, false)
		s.shed(e, StageDispatch, true, t)
		shed = true
	}
	return shed
}

// shed rejects e with OutcomeDeadlineExceeded at stage and counts it in its
// queue's deadline statistics.
func (s *Scheduler) shed(e *entry, stage DeadlineStage, queued bool, t instant) {
	slo, overdue := e.spec().SLO, t-e.deadline
	e.mq.expired[e.class][stage]++
	a := s.finish(e, OutcomeDeadlineExceeded, queued, t)
	a.Stage, a.SLO, a.Overdue = stage, slo, overdue
}

// nextLate returns the first instant at which shedLate has work: one
// nanosecond after the earliest deadline.
func (s *Scheduler) nextLate() (instant, bool) {
	if len(s.deadlines) == 0 {
		return 0, false
	}
	return addSat((*entry)(s.deadlines[0]).deadline, time.Nanosecond), true
}
