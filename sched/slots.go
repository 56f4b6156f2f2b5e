package sched

import "math"

// This file holds SMG's slot pool: capacity, per-class reservations, the
// slot gate, and preemption victims.
//
// Slots free to class C (SMG's guarded acquire):
//
//	free(C) = capacity − in_flight − Σ_{H>C} max(0, reserved[H] − in_flight[H])
//
// saturating at 0: a higher class's unused reservation is withheld from
// lower classes, C's own reservation does not limit C, and lower classes'
// reservations are ignored. free is monotone in C. A starvation-promoted
// entry ignores reservations and needs only in_flight < capacity. The
// first in_flight includes the slots the warm-start seeds hold, each
// worker's within its own slots (engine.go), and free is 0 for every class
// while the warm start holds the gate.

// maxCapacity is SMG's u16 capacity ceiling.
const maxCapacity = math.MaxUint16

// workerCapacity returns the slot capacity of a worker set: the sum of the
// destination workers' slot counts (a prefill-role worker has none), or
// fallback with no destination worker, capped at 65535.
func workerCapacity(workers []*workerState, fallback uint32) uint32 {
	var sum uint32
	destinations := false
	for _, w := range workers {
		if w.role == RolePrefill {
			continue // its slots run prefill halves, not requests
		}
		destinations = true
		sum += min(w.slots, maxCapacity)
		if sum >= maxCapacity {
			return maxCapacity
		}
	}
	if !destinations {
		return min(fallback, maxCapacity)
	}
	return sum
}

// desiredReservation returns class c's reservation at capacity:
// min(capacity, max(floor, ceil(per_slot × capacity))), in float64 with
// math.Ceil, as upstream computes it.
func desiredReservation(c *ClassConfig, capacity uint32) uint32 {
	d := uint32(c.ReservedFloor)
	if share := math.Ceil(c.ReservedPerSlot * float64(capacity)); share > float64(d) {
		d = uint32(min(share, float64(capacity)))
	}
	return min(d, capacity)
}

// desiredReservations returns every class's desired reservation at capacity.
func (s *Scheduler) desiredReservations(capacity uint32) [NumPriorities]uint32 {
	var d [NumPriorities]uint32
	for p := range d {
		d[p] = desiredReservation(&s.cfg.Priority.Classes[p], capacity)
	}
	return d
}

// clampReservations fits desired reservations into capacity in priority
// order, system → interactive → default → bulk, each class taking
// min(desired, remaining). It is SMG's runtime rule; startup fails instead.
func clampReservations(desired [NumPriorities]uint32, capacity uint32) [NumPriorities]uint32 {
	var out [NumPriorities]uint32
	remaining := capacity
	for p := NumPriorities - 1; p >= 0; p-- {
		out[p] = min(desired[p], remaining)
		remaining -= out[p]
	}
	return out
}

// applyCapacity moves the pool to capacity c with the clamped reservations.
// Upstream orders the two writes so a concurrent reader only ever sees a
// conservative pair: on growth the reservations rise before the capacity,
// on shrink the capacity falls first. Here both happen inside one call, but
// the order is kept explicit.
func (s *Scheduler) applyCapacity(c uint32) {
	if c == s.capacity {
		return
	}
	reserved := clampReservations(s.desiredReservations(c), c)
	if c > s.capacity {
		s.reserved = reserved
		s.capacity = c
		return
	}
	s.capacity = c
	s.reserved = reserved
}

// freeSlots returns free(p) (see the top of this file).
func (s *Scheduler) freeSlots(p Priority) uint32 {
	occ := s.occupied()
	if s.warming || occ >= s.capacity {
		return 0
	}
	free := s.capacity - occ
	for h := p + 1; h < NumPriorities; h++ {
		if r, in := s.reserved[h], s.inFlight[h]; r > in {
			if r-in >= free {
				return 0
			}
			free -= r - in
		}
	}
	return free
}

// slotOpen reports whether e passes the slot gate: always with the priority
// scheduler off; for a promoted entry while in_flight < capacity; otherwise
// while free(e's class) > 0.
func (s *Scheduler) slotOpen(e *entry) bool {
	switch {
	case !s.prio:
		return true
	case e.promoted:
		return !s.warming && s.occupied() < s.capacity
	default:
		return s.freeSlots(e.prio) > 0
	}
}

// slotsForQueued reports whether the slot gate can pass some queued entry:
// one of the highest queued class while free(class) > 0 (free is monotone
// in the class, so lower classes cannot pass when it cannot), or a promoted
// one while in_flight < capacity. O(classes).
func (s *Scheduler) slotsForQueued() bool {
	if s.warming || s.occupied() >= s.capacity {
		return false
	}
	for p := NumPriorities - 1; p >= 0; p-- {
		if s.wait[p].n > 0 {
			if s.freeSlots(Priority(p)) > 0 {
				return true
			}
			break
		}
	}
	for p := range s.wait {
		if e := s.wait[p].head; e != nil && e.promoted {
			return true
		}
	}
	return false
}

// takeSlot records that e now holds a slot and, with the priority scheduler
// on, lists it as preemptible (newest at the tail).
func (s *Scheduler) takeSlot(e *entry) {
	s.inFlight[e.prio]++
	s.inFlightTotal++
	if s.prio {
		s.preemptible[e.prio].pushBack(e)
		e.flags |= flagPreemptible
	}
}

// unlistPreemptible takes e off its preemptible list, if it is on it.
func (s *Scheduler) unlistPreemptible(e *entry) {
	if e.flags&flagPreemptible != 0 {
		s.preemptible[e.prio].remove(e)
		e.flags &^= flagPreemptible
	}
}

// releaseSlot returns e's slot.
func (s *Scheduler) releaseSlot(e *entry) {
	s.unlistPreemptible(e)
	s.inFlight[e.prio]--
	s.inFlightTotal--
}

// preemptFor picks at most one victim for the queued preemptor by: an
// in-flight request of a strictly lower class with no first token that is
// not already a victim, from the lowest class first and the most recently
// dispatched within it. O(classes). The victim leaves the preemptible
// lists for good, and victim and preemptor are linked so that the slot the
// victim frees goes to the preemptor first.
func (s *Scheduler) preemptFor(by *entry) {
	for p := Priority(0); p < by.prio; p++ {
		v := s.preemptible[p].tail
		if v == nil {
			continue
		}
		s.unlistPreemptible(v)
		v.flags |= flagVictim
		v.peer, by.peer = by, v
		s.preemptions[p][by.prio]++
		s.admits[p][OutcomePreempted]++
		a := s.emit(ActionPreempt, v, OutcomePreempted)
		a.By = by.prio
		return
	}
}
