package sched

import (
	"math"
	"testing"
)

func TestStrictKey(t *testing.T) {
	tests := []struct {
		name    string
		p       Priority
		hint    uint32
		hasHint bool
		want    uint64
	}{
		{"bulk without hint", PriorityBulk, 0, false, 0},
		{"hint ignored when absent", PriorityBulk, 7, false, 0},
		{"bulk with the largest hint", PriorityBulk, math.MaxUint32, true, math.MaxUint32},
		{"default without hint", PriorityDefault, 0, false, 1 << 32},
		{"interactive hint 0", PriorityInteractive, 0, true, 2 << 32},
		{"system hint 5", PrioritySystem, 5, true, 3<<32 | 5},
		{"out-of-range class is default", Priority(9), 1, true, 1<<32 | 1},
	}
	for _, tt := range tests {
		if got := strictKey(tt.p, tt.hint, tt.hasHint); got != tt.want {
			t.Errorf("%s: strictKey = %#x, want %#x", tt.name, got, tt.want)
		}
	}
	// No hint lifts a class above the next one.
	for p := PriorityBulk; p < PrioritySystem; p++ {
		if strictKey(p, math.MaxUint32, true) >= strictKey(p+1, 0, false) {
			t.Errorf("%s with the largest hint ranks with %s", p, p+1)
		}
	}
}

// hinted is a request of class p carrying a strict-priority hint.
func hinted(id uint64, p Priority, hint uint32) Request {
	r := simReq(id, p, 16)
	r.StrictPriority, r.HasStrictPriority = hint, true
	return r
}

// The attack: a tenant capped at bulk sends strict priority 4294967295. The
// hint orders it only among bulk requests; queued interactive work goes
// first.
func TestPriority_StrictHintDoesNotCrossClasses(t *testing.T) {
	h := newSim(t, simSMG(noPreemption), simWorker("w", 1))
	h.want("fill the slot", h.submit(simReq(1, PriorityBulk, 16)), "dispatch 1 w/0")
	h.want("hinted bulk queues", h.submit(hinted(2, PriorityBulk, math.MaxUint32)), "queue 2")
	h.want("plain bulk queues", h.submit(simReq(3, PriorityBulk, 16)), "queue 3")
	h.want("interactive queues", h.submit(simReq(4, PriorityInteractive, 16)), "queue 4")
	h.want("interactive with hint 0 queues", h.submit(hinted(5, PriorityInteractive, 0)), "queue 5")
	h.want("interactive with hint 1 queues", h.submit(hinted(6, PriorityInteractive, 1)), "queue 6")
	var order []string
	for _, id := range []uint64{1, 6, 4, 5, 2} {
		order = append(order, h.finish(id)...)
	}
	h.want("order: class first, then hint, then arrival", order,
		"dispatch 6 w/0 queued", "dispatch 4 w/0 queued", "dispatch 5 w/0 queued",
		"dispatch 2 w/0 queued", "dispatch 3 w/0 queued")
}

// The head-of-line half of the attack: a free slot only interactive may use
// (its reservation) must reach the queued interactive request, not stay
// blocked behind a bulk head that may not take it.
func TestPriority_ReservedSlotNotBlockedByHintedHead(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		noPreemption(pc)
		pc.Classes[PriorityInteractive].ReservedFloor = 1
	})
	h := newSim(t, cfg, simWorker("w", 2))
	h.want("bulk takes the shared slot", h.submit(simReq(1, PriorityBulk, 16)), "dispatch 1 w/0")
	h.want("interactive takes its reserved slot", h.submit(simReq(2, PriorityInteractive, 16)), "dispatch 2 w/0")
	h.want("hinted bulk queues", h.submit(hinted(3, PriorityBulk, math.MaxUint32)), "queue 3")
	h.want("interactive queues", h.submit(simReq(4, PriorityInteractive, 16)), "queue 4")
	// The reserved slot frees: free(bulk) stays 0, free(interactive) is 1.
	h.want("the reserved slot goes to interactive", h.finish(2), "dispatch 4 w/0 queued")
	h.want("bulk goes when the shared slot frees", h.finish(1), "dispatch 3 w/0 queued")
}

// noPreemption drops every reservation and preemption, so only the queue
// order decides.
func noPreemption(pc *PriorityConfig) {
	simZeroFloors(pc)
	for p := range pc.Classes {
		pc.Classes[p].CanPreempt = false
	}
}
