package sched

import (
	"strconv"
	"testing"
	"time"
)

func TestSlots_ReservationsAtCapacity(t *testing.T) {
	tests := []struct {
		capacity uint32
		reserved [NumPriorities]uint32 // bulk, default, interactive, system
		free     [NumPriorities]uint32 // idle slots free to each class
	}{
		{1024, [4]uint32{0, 103, 256, 32}, [4]uint32{633, 736, 992, 1024}},
		{800, [4]uint32{0, 80, 200, 32}, [4]uint32{488, 568, 768, 800}},
		{256, [4]uint32{0, 26, 128, 32}, [4]uint32{70, 96, 224, 256}},
		{200, [4]uint32{0, 20, 128, 32}, [4]uint32{20, 40, 168, 200}},
		{178, [4]uint32{0, 18, 128, 32}, [4]uint32{0, 18, 146, 178}},
	}
	for _, tt := range tests {
		h := newSim(t, simSMG(nil), simWorker("w", tt.capacity))
		st := h.s.Stats()
		if st.Capacity != tt.capacity || st.Reserved != tt.reserved {
			t.Errorf("capacity %d: got capacity %d reserved %v, want reserved %v", tt.capacity, st.Capacity, st.Reserved, tt.reserved)
		}
		for p := range Priority(NumPriorities) {
			if got := h.s.freeSlots(p); got != tt.free[p] {
				t.Errorf("capacity %d: free(%s) = %d, want %d", tt.capacity, p, got, tt.free[p])
			}
		}
	}
}

func TestSlots_CapacitySources(t *testing.T) {
	tests := []struct {
		name     string
		fallback uint32
		workers  []Worker
		want     uint32
	}{
		{"no workers: default fallback", 0, nil, 1024},
		{"no workers: configured fallback", 300, nil, 300},
		{"reported sum", 0, []Worker{simWorker("a", 256), simWorker("b", 128)}, 384},
		{"mixed: 64 per non-reporter", 0, []Worker{simWorker("a", 256), simWorker("b", 0)}, 320},
		{"three non-reporters", 0, []Worker{simWorker("a", 0), simWorker("b", 0), simWorker("c", 0)}, 192},
		{"u16 ceiling", 0, []Worker{simWorker("a", 40000), simWorker("b", 40000)}, 65535},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{FallbackCapacity: tt.fallback} // slot gate off: no startup check
			h := newSim(t, cfg, tt.workers...)
			if got := h.s.Stats().Capacity; got != tt.want {
				t.Errorf("capacity = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSlots_BulkGetsTwentySlotsAtCapacity200(t *testing.T) {
	h := newSim(t, simSMG(nil), simWorker("w", 200))
	for id := uint64(1); id <= 20; id++ {
		h.want("bulk within its share", h.submit(simReq(id, PriorityBulk, 16)), "dispatch "+simItoa(id)+" w/0")
	}
	h.want("21st bulk queues", h.submit(simReq(21, PriorityBulk, 16)), "queue 21")
	if st := h.s.Stats(); st.QueueDepth[PriorityBulk] != 1 || st.InFlight[PriorityBulk] != 20 {
		t.Fatalf("depth %v in flight %v", st.QueueDepth, st.InFlight)
	}
	// Default may still use the default reservation and the shared rest.
	h.want("default still admitted", h.submit(simReq(22, PriorityDefault, 16)), "dispatch 22 w/0")
}

func TestNew_ReservationsExceedCapacity(t *testing.T) {
	_, err := New(simSMG(nil), []Worker{simWorker("w", 100)})
	const want = "sum of class reservations (142) exceeds capacity (100)"
	if err == nil || err.Error() != want {
		t.Fatalf("New error = %v, want %q", err, want)
	}
	// Without the priority scheduler the reservations are not checked.
	cfg := simSMG(nil)
	cfg.Priority.Enabled = false
	if _, err := New(cfg, []Worker{simWorker("w", 100)}); err != nil {
		t.Fatalf("New with priority off: %v", err)
	}
}

func TestSlots_RuntimeShrinkAndRecovery(t *testing.T) {
	h := newSim(t, simSMG(nil), simWorker("w", 256))
	steps := []struct {
		capacity uint32
		reserved [NumPriorities]uint32
	}{
		{80, [4]uint32{0, 0, 48, 32}},
		{256, [4]uint32{0, 26, 128, 32}},
		{800, [4]uint32{0, 80, 200, 32}},
		{1, [4]uint32{0, 0, 0, 1}},
	}
	for _, st := range steps {
		h.workers(simWorker("w", st.capacity))
		got := h.s.Stats()
		if got.Capacity != st.capacity || got.Reserved != st.reserved {
			t.Fatalf("capacity %d: got %d %v, want %v", st.capacity, got.Capacity, got.Reserved, st.reserved)
		}
	}
}

func TestSlots_ClampReservations(t *testing.T) {
	got := clampReservations([NumPriorities]uint32{5, 20, 128, 32}, 100)
	if want := [NumPriorities]uint32{0, 0, 68, 32}; got != want {
		t.Fatalf("clamp = %v, want %v", got, want)
	}
	got = clampReservations([NumPriorities]uint32{5, 20, 10, 32}, 100)
	if want := [NumPriorities]uint32{5, 20, 10, 32}; got != want {
		t.Fatalf("clamp below capacity = %v, want %v", got, want)
	}
}

func TestSlots_DesiredReservationRounding(t *testing.T) {
	tests := []struct {
		c        ClassConfig
		capacity uint32
		want     uint32
	}{
		{ClassConfig{ReservedPerSlot: 0.10}, 178, 18}, // ceil(17.8)
		{ClassConfig{ReservedPerSlot: 0.10}, 1024, 103},
		{ClassConfig{ReservedFloor: 128, ReservedPerSlot: 0.25}, 100, 100}, // floor capped at capacity
		{ClassConfig{ReservedPerSlot: 7.5}, 10, 10},                        // share above 1 capped
		{ClassConfig{ReservedPerSlot: 1e300}, 10, 10},
		{ClassConfig{}, 0, 0},
	}
	for _, tt := range tests {
		if got := desiredReservation(&tt.c, tt.capacity); got != tt.want {
			t.Errorf("desired(%+v, %d) = %d, want %d", tt.c, tt.capacity, got, tt.want)
		}
	}
}

func TestPreempt_VictimChoice(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].CanPreempt = true // bulk has no lower class to take from
	}), simWorker("w", 4))
	h.want("bulk 1", h.submit(simReq(1, PriorityBulk, 64)), "dispatch 1 w/0")
	h.want("bulk 2", h.submit(simReq(2, PriorityBulk, 64)), "dispatch 2 w/0")
	h.want("default 3", h.submit(simReq(3, PriorityDefault, 64)), "dispatch 3 w/0")
	h.want("default 4", h.submit(simReq(4, PriorityDefault, 64)), "dispatch 4 w/0")

	h.want("lowest class, newest first", h.submit(simReq(5, PriorityInteractive, 64)), "preempt 2 bulk by interactive", "queue 5")
	h.want("a victim is never taken twice", h.submit(simReq(6, PriorityInteractive, 64)), "preempt 1 bulk by interactive", "queue 6")
	h.want("first token", h.first(3))
	h.want("past first token is spared", h.submit(simReq(7, PriorityInteractive, 64)), "preempt 4 default by interactive", "queue 7")
	h.want("no victim left", h.submit(simReq(8, PrioritySystem, 64)), "queue 8")
	h.want("bulk arrivals never preempt", h.submit(simReq(9, PriorityBulk, 64)), "queue 9")

	// Victim 1 (taken by 6) ends first: 6 gets the slot although 5 queued
	// earlier in the same class.
	h.want("hand-off to the preemptor", h.release(1), "dispatch 6 w/0 queued")
	h.want("the hand-off beats even a queued system request", h.release(2), "dispatch 5 w/0 queued")
	h.want("hand-off to 7", h.release(4), "dispatch 7 w/0 queued")
	h.want("a plain release serves the best queued request", h.release(3), "dispatch 8 w/0 queued")

	st := h.s.Stats()
	if st.Preemptions[PriorityBulk][PriorityInteractive] != 2 || st.Preemptions[PriorityDefault][PriorityInteractive] != 1 {
		t.Fatalf("preemptions = %v", st.Preemptions)
	}
	if st.Admits[PriorityBulk][OutcomePreempted] != 2 || st.Admits[PriorityDefault][OutcomePreempted] != 1 {
		t.Fatalf("admits = %v", st.Admits)
	}
}

func TestPreempt_OnlyWhenTheSlotGateIsFull(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].QueueSize = 0
	}), simWorker("w", 2))
	h.want("bulk 1", h.submit(simReq(1, PriorityBulk, 64)), "dispatch 1 w/0")
	h.want("free slot: no preemption", h.submit(simReq(2, PriorityInteractive, 64)), "dispatch 2 w/0")
	h.want("queue full: the victim is spared", h.submit(simReq(3, PriorityInteractive, 64)), "reject 3 queue_full")
	if st := h.s.Stats(); st.Preemptions != [NumPriorities][NumPriorities]uint64{} {
		t.Fatalf("preemptions = %v", st.Preemptions)
	}
}

func TestPreempt_TenantClampRemovesPreemptionPower(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 0
	})
	h := newSim(t, cfg, simWorker("w", 1))
	h.want("bulk holds the only slot", h.submit(simReq(1, PriorityBulk, 64)), "dispatch 1 w/0")
	// A "system" header clamped to default arrives as default: no
	// preemption, and default's queue_size 0 answers 429.
	h.want("clamped arrival", h.submit(simReq(2, PriorityDefault, 64)), "reject 2 queue_full")
	h.want("bulk finishes normally", h.finish(1))

	h2 := newSim(t, cfg, simWorker("w", 1))
	h2.submit(simReq(1, PriorityBulk, 64))
	h2.want("unclamped system preempts", h2.submit(simReq(2, PrioritySystem, 64)), "preempt 1 bulk by system", "queue 2")
}

func TestSlots_QueueFull(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].QueueSize = 2
		pc.Classes[PriorityDefault].QueueSize = 0
	}), simWorker("w", 1))
	h.want("queue_size 0 with a free slot", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	h.want("bulk 2 queues", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
	h.want("bulk 3 queues", h.submit(simReq(3, PriorityBulk, 8)), "queue 3")
	h.want("bulk 4 finds the queue full", h.submit(simReq(4, PriorityBulk, 8)), "reject 4 queue_full")
	h.want("queue_size 0 under contention", h.submit(simReq(5, PriorityDefault, 8)), "reject 5 queue_full")
	h.want("FIFO hand-off", h.release(1), "dispatch 2 w/0 queued")
	h.want("room again", h.submit(simReq(6, PriorityBulk, 8)), "queue 6")
	st := h.s.Stats()
	if st.Admits[PriorityBulk][OutcomeQueueFull] != 1 || st.Admits[PriorityDefault][OutcomeQueueFull] != 1 {
		t.Fatalf("admits = %v", st.Admits)
	}
	if st.QueueDepth[PriorityBulk] != 2 || st.QueueLimit[PriorityBulk] != 2 {
		t.Fatalf("depth %v limit %v", st.QueueDepth, st.QueueLimit)
	}
}

func TestDeadlines_QueueTimeout(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].QueueTimeout = 10 * time.Second
	}), simWorker("w", 1))
	if _, ok := h.s.NextDeadline(); ok {
		t.Fatal("deadline with nothing queued")
	}
	h.want("bulk 1", h.submit(simReq(1, PriorityBulk, 8)), "dispatch 1 w/0")
	h.want("bulk 2 queues", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
	h.at(2*time.Second).want("bulk 3 queues", h.submit(simReq(3, PriorityBulk, 8)), "queue 3")
	simWantDeadline(t, h.s, 10*time.Second)

	h.at(10*time.Second-1).want("not yet", h.tick())
	h.at(10 * time.Second)
	acts := h.s.Tick(h.now)
	h.want("timeout", simRender(acts), "reject 2 queue_timeout queued")
	if acts[0].Wait != 10*time.Second {
		t.Fatalf("wait = %v", acts[0].Wait)
	}
	simWantDeadline(t, h.s, 12*time.Second)
	h.want("slot frees", h.release(1), "dispatch 3 w/0 queued")
	if _, ok := h.s.NextDeadline(); ok {
		t.Fatal("deadline after the queue emptied")
	}
	if got := h.s.Stats().Admits[PriorityBulk][OutcomeQueueTimeout]; got != 1 {
		t.Fatalf("timeouts = %d", got)
	}
}

func TestDeadlines_StarvationPromotionAtCapacityOne(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].ReservedFloor = 1
		pc.Classes[PriorityBulk].StarvationThreshold = time.Second
	}), simWorker("w", 1))
	h.want("interactive reservation shuts bulk out", h.submit(simReq(1, PriorityBulk, 8)), "queue 1")
	simWantDeadline(t, h.s, time.Second+1)
	h.at(time.Second).want("exactly at the threshold", h.tick())
	h.at(time.Second+1).want("strictly older: promoted", h.tick(), "dispatch 1 w/0 queued")
	if got := h.s.Stats().Promotions[PriorityBulk]; got != 1 {
		t.Fatalf("promotions = %d", got)
	}
}

func TestDeadlines_PromotedNeedsOnlyAFreeSlot(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PrioritySystem].ReservedFloor = 2
		pc.Classes[PriorityDefault].StarvationThreshold = 5 * time.Second
	}), simWorker("w", 3))
	h.want("default 1", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	h.want("default 2 waits: two slots reserved for system", h.submit(simReq(2, PriorityDefault, 8)), "queue 2")
	h.want("default 3 waits", h.submit(simReq(3, PriorityDefault, 8)), "queue 3")
	h.at(6*time.Second).want("both promoted; one free slot each", h.tick(), "dispatch 2 w/0 queued", "dispatch 3 w/0 queued")
	h.want("capacity is never exceeded; promoted requests stay preemptible",
		h.submit(simReq(4, PrioritySystem, 8)), "preempt 3 default by system", "queue 4")
}

// simWantDeadline checks NextDeadline against simT0+d.
func simWantDeadline(t *testing.T, s *Scheduler, d time.Duration) {
	t.Helper()
	got, ok := s.NextDeadline()
	if !ok || !got.Equal(simT0.Add(d)) {
		t.Fatalf("NextDeadline = %v %v, want simT0+%v", got.Sub(simT0), ok, d)
	}
}

func simItoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TestDispatch_PreemptibleMark: a dispatch is marked preemptible exactly
// when some class above it may preempt (the victim rule's own condition),
// for every combination of can_preempt flags, and never with priority
// admission off.
func TestDispatch_PreemptibleMark(t *testing.T) {
	for mask := range 1 << NumPriorities {
		cfg := simSMG(func(pc *PriorityConfig) {
			simZeroFloors(pc)
			for p := range Priority(NumPriorities) {
				pc.Classes[p].CanPreempt = mask&(1<<p) != 0
			}
		})
		for _, enabled := range []bool{true, false} {
			cfg.Priority.Enabled = enabled
			h := newSim(t, cfg, simWorker("w", 16))
			for p := range Priority(NumPriorities) {
				as := h.s.Submit(h.now, simReq(uint64(p)+1, p, 64))
				if len(as) != 1 || as[0].Kind != ActionDispatch {
					t.Fatalf("mask %b: %v", mask, simRender(as))
				}
				want := false
				for by := p + 1; enabled && by < NumPriorities; by++ {
					want = want || mask&(1<<by) != 0
				}
				if as[0].Preemptible != want {
					t.Errorf("mask %04b enabled %v class %v: preemptible %v, want %v", mask, enabled, p, as[0].Preemptible, want)
				}
			}
		}
	}
}
