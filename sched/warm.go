package sched

import (
	"cmp"
	"slices"
)

// This file holds what the warm start's hold (engine.go) does to arrivals.
//
// While the hold keeps the slot gate closed, every arrival with an eligible
// worker has to queue, yet no slot is known to be missing: tollgate is only
// still reading the engines. So an arrival is not refused by a queue limit
// then, and does not preempt: it queues, flagged flagWarm, and waits for
// the hold's end or its queue timeout. When the hold ends a dispatch pass
// runs first; then every flagged request still queued is judged as an
// arrival of that moment would be, in arrival order (judgeWarm): SMG's
// queue_size and Dynamo's per-worker limits count the requests queued
// before the hold and the flagged ones kept so far, a request past a limit
// is rejected (queued, with its wait), and a kept one of a can_preempt
// class that finds no free slot preempts at most one victim.
//
// The flagged requests of a priority class are bounded by its queue_size
// plus the capacity: at most that many can be dispatched or kept when the
// hold ends, so an arrival beyond it is refused at once (OutcomeQueueFull).

// joinWarm queues e while the warm start holds the slot gate, unless its
// class already has queue_size + capacity requests waiting. It reports
// whether e was queued.
func (s *Scheduler) joinWarm(e *entry, t instant) bool {
	bound := uint64(s.cfg.Priority.Classes[e.prio].QueueSize) + uint64(s.capacity)
	if uint64(s.wait[e.prio].n) >= bound {
		s.finish(e, OutcomeQueueFull, false, t)
		return false
	}
	e.flags |= flagWarm
	s.enqueue(e, t)
	return true
}

// classKey names one policy class of one queue.
type classKey struct {
	mq    *modelQueue
	class int
}

// judgeWarm applies the limits and preemption the hold deferred to the
// flagged requests still queued (see the top of the file). Call it after
// the hold ended and a pass ran.
func (s *Scheduler) judgeWarm(t instant) {
	var (
		warm []*entry
		kept [NumPriorities]uint32
	)
	for p := range s.wait {
		for e := s.wait[p].head; e != nil; e = e.next {
			if e.flags&flagWarm != 0 {
				warm = append(warm, e)
			} else {
				kept[p]++
			}
		}
	}
	if len(warm) == 0 {
		return
	}
	slices.SortFunc(warm, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	usage := keptUsage(warm)
	for _, e := range warm {
		e.flags &^= flagWarm
		c := &s.cfg.Priority.Classes[e.prio]
		if kept[e.prio] >= c.QueueSize {
			s.unqueue(e, false)
			s.finish(e, OutcomeQueueFull, true, t)
			continue
		}
		k := classKey{e.mq, e.class}
		if kind, current, limit := s.limitReached(e, usage[k]); kind != LimitNone {
			e.mq.backpressure[e.class][kind]++
			s.unqueue(e, false)
			a := s.finish(e, OutcomeClassLimit, true, t)
			a.LimitKind, a.LimitCurrent, a.LimitValue = kind, current, limit
			continue
		}
		kept[e.prio]++
		u := usage[k]
		usage[k] = classUsage{u.requests + 1, u.isl + e.isl, u.cached + e.cached}
		if c.CanPreempt && e.flags&flagUnservable == 0 && s.freeSlots(e.prio) == 0 {
			s.preemptFor(e)
		}
	}
}

// keptUsage returns, for each policy class holding a flagged request, the
// usage its per-worker limits count before any flagged one is kept: the
// class's queue without the flagged requests.
func keptUsage(warm []*entry) map[classKey]classUsage {
	usage := make(map[classKey]classUsage)
	for _, e := range warm {
		k := classKey{e.mq, e.class}
		if _, ok := usage[k]; !ok {
			r, isl, cached := e.mq.ring.classStats(e.class)
			usage[k] = classUsage{r, isl, cached}
		}
	}
	for _, e := range warm {
		k := classKey{e.mq, e.class}
		u := usage[k]
		usage[k] = classUsage{u.requests - 1, u.isl - e.isl, u.cached - e.cached}
	}
	return usage
}
