package sched

import (
	"fmt"
	"testing"
	"time"
)

func TestCombined_InteractiveBeforeBulkInsideAClass(t *testing.T) {
	noPreempt := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		for p := range pc.Classes {
			pc.Classes[p].CanPreempt = false
		}
	})
	busyGate := Config{Policy: PolicyConfig{Root: simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})}}
	for name, cfg := range map[string]Config{"slot gate": noPreempt, "worker gate": busyGate} {
		t.Run(name, func(t *testing.T) {
			h := newSim(t, cfg, simWorker("w", 1))
			h.want("holder", h.submit(simReq(1, PriorityBulk, 8)), "dispatch 1 w/0")
			h.want("bulk waits", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
			h.want("default waits", h.submit(simReq(3, PriorityDefault, 8)), "queue 3")
			h.want("interactive waits", h.submit(simReq(4, PriorityInteractive, 8)), "queue 4")
			h.want("interactive first", h.finish(1), "dispatch 4 w/0 queued")
			h.want("then default", h.finish(4), "dispatch 3 w/0 queued")
			h.want("then bulk", h.finish(3), "dispatch 2 w/0 queued")
		})
	}
}

func TestCombined_ReservationsHoldBackWhileDRRSharesService(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].ReservedFloor = 2
	})
	cfg.Policy.Root = simProfile(ClassSpec{Name: "a", Quantum: 16}, ClassSpec{Name: "b", Quantum: 48})
	h := newSim(t, cfg, simWorker("w", 4))
	bulk := func(id uint64, class string) Request {
		r := simReq(id, PriorityBulk, 16)
		r.Class = class
		return r
	}
	h.want("a1", h.submit(bulk(1, "a")), "dispatch 1 w/0")
	h.want("b1", h.submit(bulk(2, "b")), "dispatch 2 w/0")
	for id := uint64(3); id <= 14; id += 2 {
		h.want("bulk beyond the two unreserved slots waits", h.submit(bulk(id, "a")), "queue "+simItoa(id))
		h.want("bulk beyond the two unreserved slots waits", h.submit(bulk(id+1, "b")), "queue "+simItoa(id+1))
	}
	interactive := simReq(20, PriorityInteractive, 16)
	interactive.Class = "b"
	h.want("the reservation is there for interactive", h.submit(interactive), "dispatch 20 w/0")
	// Each bulk completion frees one bulk slot. DRR with quanta 16:48 at
	// cost 16 serves a once for every three b: the queued token service
	// follows the quanta while the reservation still caps bulk at two.
	want := []string{
		"dispatch 3 w/0 queued",  // a (the cursor starts at a)
		"dispatch 4 w/0 queued",  // b
		"dispatch 6 w/0 queued",  // b: carry
		"dispatch 8 w/0 queued",  // b: carry
		"dispatch 5 w/0 queued",  // a
		"dispatch 10 w/0 queued", // b
		"dispatch 12 w/0 queued", // b
		"dispatch 14 w/0 queued", // b
	}
	inFlight := []uint64{1, 2}
	for i, w := range want {
		done := inFlight[0]
		inFlight = inFlight[1:]
		got := h.finish(done)
		h.want("completion "+simItoa(uint64(i)), got, w)
		inFlight = append(inFlight, dispatchedID(t, got))
		if st := h.s.Stats(); st.InFlight[PriorityBulk] != 2 {
			t.Fatalf("bulk in flight %d, want the reservation to cap it at 2", st.InFlight[PriorityBulk])
		}
	}
}

// dispatchedID returns the ID of the single dispatch in rendered actions.
func dispatchedID(t *testing.T, got []string) uint64 {
	t.Helper()
	var id uint64
	var w string
	if len(got) != 1 {
		t.Fatalf("want one dispatch, got %v", got)
	}
	if _, err := fmt.Sscanf(got[0], "dispatch %d %s", &id, &w); err != nil {
		t.Fatalf("parse %q: %v", got[0], err)
	}
	return id
}

func TestCombined_StarvingBulkServedUnderSustainedInteractiveLoad(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].ReservedFloor = 2
		pc.Classes[PriorityInteractive].CanPreempt = false
		pc.Classes[PriorityBulk].StarvationThreshold = 10 * time.Second
	}), simWorker("w", 2))
	h.want("bulk is shut out by the reservation", h.submit(simReq(1, PriorityBulk, 8)), "queue 1")
	next := uint64(100)
	var inFlight []uint64
	for range 2 {
		got := h.submit(simReq(next, PriorityInteractive, 8))
		inFlight = append(inFlight, dispatchedID(t, got))
		next++
	}
	served := time.Duration(-1)
	for sec := 1; sec <= 20 && served < 0; sec++ {
		h.at(time.Duration(sec) * time.Second)
		for range 2 { // two new interactive requests a second keep a backlog
			h.submit(simReq(next, PriorityInteractive, 8))
			next++
		}
		h.tick()
		got := h.finish(inFlight[0]) // one interactive completes a second
		inFlight = inFlight[1:]
		id := dispatchedID(t, got)
		if id == 1 {
			served = time.Duration(sec) * time.Second
			continue
		}
		inFlight = append(inFlight, id)
	}
	if served != 11*time.Second {
		t.Fatalf("bulk served at %v, want at 11s (promoted after 10s, then the next free slot)", served)
	}
	if st := h.s.Stats(); st.Promotions[PriorityBulk] != 1 || st.QueueDepth[PriorityInteractive] == 0 {
		t.Fatalf("promotions %v depth %v", st.Promotions, st.QueueDepth)
	}
}
