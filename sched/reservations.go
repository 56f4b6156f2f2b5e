package sched

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ReservationError is New's refusal of an SMG configuration whose class
// reservations do not fit in the slots of the initial worker set. Its
// Error is upstream's text; its fields say which classes and which workers
// add up, for a caller that knows where they came from (the shell names
// the files).
type ReservationError struct {
	// Sum is the classes' reservations at Capacity, the worker set's slots
	// (at most 65535).
	Sum      uint64
	Capacity uint32
	// Classes is each class's reservation at Capacity, by Priority.
	Classes [NumPriorities]ClassReservation
	// Workers is each worker's slots, in the set's order; empty when the
	// set has no worker and Capacity is Config.FallbackCapacity.
	Workers []WorkerSlots
	// Needed is the least capacity from which on every capacity up to
	// 65535 fits the reservations; 0 when 65535 does not.
	Needed uint32
}

// ClassReservation is one class's reservation at a capacity and the
// settings it comes from: max(ReservedFloor, ceil(ReservedPerSlot ×
// capacity)), at most the capacity.
type ClassReservation struct {
	Reserved        uint32
	ReservedFloor   uint16
	ReservedPerSlot float64
}

// WorkerSlots is one worker's SMG slots.
type WorkerSlots struct {
	ID    string
	Slots uint32
	// Default is set when the worker did not give its slots
	// (MaxRunningRequests 0): Slots is DefaultMaxRunningRequests.
	Default bool
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("sum of class reservations (%d) exceeds capacity (%d)", e.Sum, e.Capacity)
}

// Terms spells the sum out, highest class first, each class with the
// setting its reservation comes from, for example "system 32
// (reserved_floor) + interactive 100 (reserved_floor 128, at most the
// capacity) + default 10 (reserved_per_slot 0.1 × 100)". Classes that
// reserve nothing are left out.
func (e *ReservationError) Terms() string {
	var terms []string
	for p := Priority(NumPriorities - 1); ; p-- {
		if c := e.Classes[p]; c.Reserved > 0 {
			terms = append(terms, p.String()+" "+strconv.FormatUint(uint64(c.Reserved), 10)+" ("+c.source(e.Capacity)+")")
		}
		if p == 0 {
			break
		}
	}
	return strings.Join(terms, " + ")
}

// source names the setting a reservation at capacity comes from.
func (c ClassReservation) source(capacity uint32) string {
	share := math.Ceil(c.ReservedPerSlot * float64(capacity))
	var s string
	if share > float64(c.ReservedFloor) {
		s = "reserved_per_slot " + strconv.FormatFloat(c.ReservedPerSlot, 'g', -1, 64) + " × " + strconv.FormatUint(uint64(capacity), 10)
	} else {
		s = "reserved_floor"
		if c.Reserved < uint32(c.ReservedFloor) {
			s += " " + strconv.FormatUint(uint64(c.ReservedFloor), 10)
		}
	}
	if c.Reserved == capacity && max(share, float64(c.ReservedFloor)) > float64(capacity) {
		s += ", at most the capacity"
	}
	return s
}

// reservationError is the startup check: the desired reservations at the
// current capacity must fit in it.
func (s *Scheduler) reservationError(desired [NumPriorities]uint32) error {
	var sum uint64
	for _, d := range desired {
		sum += uint64(d)
	}
	if sum <= uint64(s.capacity) {
		return nil
	}
	e := &ReservationError{Sum: sum, Capacity: s.capacity}
	for p := range e.Classes {
		c := &s.cfg.Priority.Classes[p]
		e.Classes[p] = ClassReservation{Reserved: desired[p], ReservedFloor: c.ReservedFloor, ReservedPerSlot: c.ReservedPerSlot}
	}
	for _, w := range s.workers {
		e.Workers = append(e.Workers, WorkerSlots{ID: w.id, Slots: w.slots, Default: !w.slotsGiven})
	}
	if s.capacity < maxCapacity {
		e.Needed = s.capacity + 1
		for c := uint32(maxCapacity); c > s.capacity; c-- {
			if !s.reservationsFit(c) {
				e.Needed = c + 1
				if c == maxCapacity {
					e.Needed = 0
				}
				break
			}
		}
	}
	return e
}

// reservationsFit reports whether the desired reservations at capacity
// fit in it.
func (s *Scheduler) reservationsFit(capacity uint32) bool {
	var sum uint64
	for _, d := range s.desiredReservations(capacity) {
		sum += uint64(d)
	}
	return sum <= uint64(capacity)
}
