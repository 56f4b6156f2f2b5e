package sched

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNew_ReservationErrorSaysWhatAddsUp: the startup check keeps
// upstream's text and carries the classes, the workers and the capacity
// that would fit.
func TestNew_ReservationErrorSaysWhatAddsUp(t *testing.T) {
	_, err := New(simSMG(nil), []Worker{simWorker("w1", 64), {ID: "w2"}})
	re, ok := errors.AsType[*ReservationError](err)
	if !ok {
		t.Fatalf("error %v is no *ReservationError", err)
	}
	if got, want := err.Error(), "sum of class reservations (173) exceeds capacity (128)"; got != want {
		t.Errorf("Error() = %q, want upstream's %q", got, want)
	}
	want := &ReservationError{
		Sum:      173,
		Capacity: 128,
		Classes: [NumPriorities]ClassReservation{
			PriorityBulk:        {},
			PriorityDefault:     {Reserved: 13, ReservedPerSlot: 0.1},
			PriorityInteractive: {Reserved: 128, ReservedFloor: 128, ReservedPerSlot: 0.25},
			PrioritySystem:      {Reserved: 32, ReservedFloor: 32},
		},
		Workers: []WorkerSlots{{ID: "w1", Slots: 64}, {ID: "w2", Slots: 64, Default: true}},
		// 32 + max(128, ⌈0.25 C⌉) + ⌈0.1 C⌉ ≤ C from C = 178 on.
		Needed: 178,
	}
	if diff := cmp.Diff(want, re); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, want := re.Terms(), "system 32 (reserved_floor) + interactive 128 (reserved_floor) + default 13 (reserved_per_slot 0.1 × 128)"; got != want {
		t.Errorf("Terms() = %q, want %q", got, want)
	}
}

func TestReservationError_Terms(t *testing.T) {
	tests := []struct {
		name     string
		capacity uint32
		mod      func(*PriorityConfig)
		want     string
		needed   uint32
	}{
		{"floor above the capacity", 100, nil,
			"system 32 (reserved_floor) + interactive 100 (reserved_floor 128, at most the capacity) + default 10 (reserved_per_slot 0.1 × 100)", 178},
		{"share above the capacity", 10, func(pc *PriorityConfig) {
			simZeroFloors(pc)
			pc.Classes[PriorityBulk].ReservedPerSlot = 1.5
			pc.Classes[PrioritySystem].ReservedFloor = 1
		}, "system 1 (reserved_floor) + bulk 10 (reserved_per_slot 1.5 × 10, at most the capacity)", 0},
		// ⌈0.5 C⌉ + ⌈0.5 C⌉ exceeds every odd C: 65535 does not fit.
		{"odd capacities never fit", 9, func(pc *PriorityConfig) {
			simZeroFloors(pc)
			pc.Classes[PriorityBulk].ReservedPerSlot = 0.5
			pc.Classes[PriorityDefault].ReservedPerSlot = 0.5
		}, "default 5 (reserved_per_slot 0.5 × 9) + bulk 5 (reserved_per_slot 0.5 × 9)", 0},
		{"a floor alone", 40, func(pc *PriorityConfig) {
			simZeroFloors(pc)
			pc.Classes[PriorityInteractive].ReservedFloor = 30
			pc.Classes[PriorityDefault].ReservedFloor = 20
		}, "interactive 30 (reserved_floor) + default 20 (reserved_floor)", 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(simSMG(tt.mod), []Worker{simWorker("w", tt.capacity)})
			re, ok := errors.AsType[*ReservationError](err)
			if !ok {
				t.Fatalf("error %v is no *ReservationError", err)
			}
			if got := re.Terms(); got != tt.want {
				t.Errorf("Terms() = %q, want %q", got, tt.want)
			}
			if re.Needed != tt.needed {
				t.Errorf("Needed = %d, want %d", re.Needed, tt.needed)
			}
		})
	}
}
