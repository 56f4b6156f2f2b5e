package sched

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The scenarios: one worker's engine reports more than its own
// slots, and arrivals while the warm start still reads the engines.

// wantSeeded checks the slots the seeds hold.
func (h *sim) wantSeeded(step string, want uint32) {
	h.t.Helper()
	if st := h.s.Stats(); st.Seeded != want {
		h.t.Fatalf("%s: seeded %d, want %d", step, st.Seeded, want)
	}
}

func TestWarm_OverfullWorkerTakesOnlyItsOwnSlots(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	// b's bookings without a first token do not make it saturated here.
	cfg.Engine.WaitingThreshold = 16
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	// a's engine runs 10 requests on 4 tollgate slots; b is idle.
	h.at(100 * time.Millisecond)
	h.want("report", h.report(EngineLoad{Worker: "a", Running: 10}, EngineLoad{Worker: "b"}))
	for id := uint64(1); id <= 4; id++ {
		h.want("idle b", h.submit(simReq(id, PriorityDefault, 16)), fmt.Sprintf("dispatch %d b/0", id))
	}
	h.want("fleet full", h.submit(simReq(5, PriorityDefault, 16)), "queue 5")
	h.wantSeeded("a's seed", 4)
	if r := h.rank("a", 0); r.Engine.Seed != 10 {
		t.Fatalf("a's seed %d; its selection cost must keep the engine's 10", r.Engine.Seed)
	}
	// a's old requests end: a report later its seed falls and the queued
	// request goes there.
	h.at(300 * time.Millisecond)
	h.want("a drains", h.report(EngineLoad{Worker: "a", Running: 3}, EngineLoad{Worker: "b", Running: 4}))
	h.at(500 * time.Millisecond)
	h.want("a report later", h.report(EngineLoad{Worker: "a", Running: 3}, EngineLoad{Worker: "b", Running: 4}),
		"dispatch 5 a/0 queued")
	h.wantSeeded("a's 3 old requests", 3)
}

func TestWarm_SilentWorkerKeepsItsSlots(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	// b serves no metrics: the hold ends after WarmWait.
	h.at(100 * time.Millisecond)
	h.want("only a reported", h.report(EngineLoad{Worker: "a", Running: 10}))
	h.at(time.Second)
	h.want("hold over", h.tick(), "dispatch 1 b/0 queued")
	for id := uint64(2); id <= 4; id++ {
		h.want("b's slots", h.submit(simReq(id, PriorityDefault, 16)), fmt.Sprintf("dispatch %d b/0", id))
	}
	h.want("fleet full", h.submit(simReq(5, PriorityDefault, 16)), "queue 5")
	h.wantSeeded("a's seed", 4)
}

func TestWarm_LyingEngineClosesOnlyItsOwnSlots(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	var ws []Worker
	for i := range 8 {
		ws = append(ws, simWorker(fmt.Sprintf("w%d", i), 4))
	}
	h := newSim(t, cfg, ws...)
	round := func() []EngineLoad {
		loads := []EngineLoad{{Worker: "w0", Waiting: 1e9, Running: 4}}
		for i := 1; i < 8; i++ {
			loads = append(loads, EngineLoad{Worker: fmt.Sprintf("w%d", i)})
		}
		return loads
	}
	h.want("report", h.report(round()...))
	perWorker := map[string]int{}
	id := uint64(0)
	// The liar keeps answering for ten seconds; the other 7 × 4 slots
	// admit at once, one request per 100 ms.
	for step := range 100 {
		h.at(time.Duration(step) * 100 * time.Millisecond)
		h.want("round", h.report(round()...))
		if id == 28 {
			continue
		}
		id++
		got := h.submit(simReq(id, PriorityDefault, 16))
		if len(got) != 1 {
			t.Fatalf("submit %d: %v", id, got)
		}
		var w string
		var r int
		if _, err := fmt.Sscanf(got[0], "dispatch "+fmt.Sprint(id)+" %2s/%d", &w, &r); err != nil || w == "w0" {
			t.Fatalf("submit %d: %v; want a dispatch to a worker other than w0", id, got)
		}
		perWorker[w]++
	}
	for i := 1; i < 8; i++ {
		if n := perWorker[fmt.Sprintf("w%d", i)]; n != 4 {
			t.Fatalf("w%d got %d requests, want its 4 slots: %v", i, n, perWorker)
		}
	}
	h.want("fleet full", h.submit(simReq(29, PriorityDefault, 16)), "queue 29")
	h.wantSeeded("w0's seed after ten seconds", 4)
	if r := h.rank("w0", 0); r.Engine.Seed != 1e9+4 || !r.Engine.Saturated {
		t.Fatalf("w0: seed %d saturated %v", r.Engine.Seed, r.Engine.Saturated)
	}
}

func TestWarm_SeedIsBoundedByTheReportedSlots(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].CanPreempt = false
	})
	cfg.Engine = simEngine()
	cfg.Engine.WaitingThreshold = 16
	// a gives no max_running_requests: its engine's report sets 2.
	h := newSim(t, cfg, Worker{ID: "a"}, simWorker("b", 4))
	h.at(100 * time.Millisecond)
	h.want("report", h.report(EngineLoad{Worker: "a", Running: 10, MaxRunning: 2}, EngineLoad{Worker: "b"}))
	h.wantSeeded("a's 2 slots, not the 64 it had before the report", 2)
	for id := uint64(1); id <= 4; id++ {
		h.want("b's slots", h.submit(simReq(id, PriorityDefault, 16)), fmt.Sprintf("dispatch %d b/0", id))
	}
	h.want("fleet full", h.submit(simReq(5, PriorityDefault, 16)), "queue 5")
	// A request pinned to a waits too: a's engine fills a's slots.
	pinned := simReq(6, PriorityInteractive, 16)
	pinned.Pin = &Pin{Worker: "a"}
	h.want("pinned", h.submit(pinned), "queue 6")
}

func TestWarm_QueueSizeZeroWaitsForTheWarmStart(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 0
	})
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 2))
	// Capacity 2: two may wait for the warm start, the third can never be
	// served when it ends.
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	h.at(10 * time.Millisecond)
	h.want("warming", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
	h.want("beyond the bound", h.submit(simReq(3, PriorityDefault, 16)), "reject 3 queue_full")
	// One slot is free when the engine has reported: request 2 is judged
	// as an arrival then, and queue_size 0 refuses it.
	h.at(100 * time.Millisecond)
	h.want("warm end", h.report(EngineLoad{Worker: "a", Running: 1}),
		"dispatch 1 a/0 queued", "reject 2 queue_full queued")
	h.want("after", h.submit(simReq(4, PriorityDefault, 16)), "reject 4 queue_full")
}

func TestWarm_HoldEndJudgesArrivalsInOrder(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 1
		pc.Classes[PriorityBulk].QueueTimeout = 500 * time.Millisecond
	})
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 2))
	for id := uint64(1); id <= 3; id++ {
		h.at(time.Duration(id) * time.Millisecond)
		h.want("warming", h.submit(simReq(id, PriorityDefault, 16)), fmt.Sprintf("queue %d", id))
	}
	h.want("warming", h.submit(simReq(4, PriorityBulk, 16)), "queue 4")
	// A request waits at most its queue timeout for the warm start.
	h.at(503 * time.Millisecond)
	h.want("timeout", h.tick(), "reject 4 queue_timeout queued")
	// No engine answers: the hold ends after WarmWait with one slot free
	// per request served; 1 and 2 are dispatched, 3 is kept (queue_size 1).
	h.at(time.Second + 1*time.Millisecond)
	h.want("hold over", h.tick(), "dispatch 1 a/0 queued", "dispatch 2 a/0 queued")
	h.want("kept", h.submit(simReq(5, PriorityDefault, 16)), "reject 5 queue_full")
	h.want("slot", h.finish(1), "dispatch 3 a/0 queued")
}

func TestWarm_ClassLimitZeroWaitsForTheWarmStart(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 100, RequestLimitPerWorker: simU64(0)}
	cfg := simSMG(simZeroFloors)
	cfg.Policy = PolicyConfig{Root: simProfile(c)}
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 1))
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	h.want("warming", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
	h.at(100 * time.Millisecond)
	h.want("warm end", h.report(EngineLoad{Worker: "a"}),
		"dispatch 1 a/0 queued", "reject 2 class_limit queued requests 0>=0")
}

func TestWarm_PreemptionWaitsForTheWarmStart(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].CanPreempt = false
	})
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 2))
	h.report(EngineLoad{Worker: "a"})
	h.want("bulk", h.submit(simReq(1, PriorityBulk, 16)), "dispatch 1 a/0")
	h.want("first token", h.first(1))
	h.want("bulk", h.submit(simReq(2, PriorityBulk, 16)), "dispatch 2 a/0")
	// Leadership moves away and back: a new warm start.
	h.s.Drain(h.now)
	h.s.Resume()
	h.at(time.Second)
	h.want("no victim before the engines are read", h.submit(simReq(3, PriorityInteractive, 16)), "queue 3")
	// The engine runs our two: no slot is free, so the interactive
	// request preempts now.
	h.at(1100 * time.Millisecond)
	h.want("warm end", h.report(EngineLoad{Worker: "a", Running: 2}), "preempt 2 bulk by interactive")
	// Request 2 was still in prefill when the engine was read, so the seed
	// counts it until the report read after its end has been followed by
	// another.
	h.want("victim ends", h.release(2))
	h.at(1200 * time.Millisecond)
	h.want("next report", h.report(EngineLoad{Worker: "a", Running: 1}))
	h.at(1300 * time.Millisecond)
	h.want("a report later", h.report(EngineLoad{Worker: "a", Running: 1}), "dispatch 3 a/0 queued")

	// Again with a free slot at the warm end: nothing is preempted.
	h.want("done", append(h.finish(1), h.finish(3)...))
	h.want("bulk", h.submit(simReq(4, PriorityBulk, 16)), "dispatch 4 a/0")
	h.s.Drain(h.now)
	h.s.Resume()
	h.at(2 * time.Second)
	h.want("warming", h.submit(simReq(5, PriorityInteractive, 16)), "queue 5")
	h.at(2100 * time.Millisecond)
	h.want("no preemption needed", h.report(EngineLoad{Worker: "a"}), "dispatch 5 a/0 queued")
}

func TestWarm_ChargeNeverExceedsTheWorkersSlots(t *testing.T) {
	// Reports far past every bound: a worker's charge stays within its
	// own slots, and the total within the pool.
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	cfg.Engine.Capacity = false
	h := newSim(t, cfg, Worker{ID: "a", DPSize: 3, MaxRunningRequests: 5}, simWorker("b", 7))
	h.report(EngineLoad{Worker: "a", Rank: 0, Running: math.MaxUint32, Waiting: math.MaxUint32},
		EngineLoad{Worker: "a", Rank: 1, Running: math.MaxUint32}, EngineLoad{Worker: "a", Rank: 2, Waiting: 3},
		EngineLoad{Worker: "b", Waiting: 1e9})
	h.wantSeeded("both full", 12)
	h.workers(Worker{ID: "a", DPSize: 3, MaxRunningRequests: 2}, simWorker("c", 3))
	h.wantSeeded("a shrank, b left", 2)
	if err := simInvariants(h.s); err != nil {
		t.Fatal(err)
	}
}

// A request the engine finished just before a scrape, whose release
// arrives here after that report, is not taken for an old request's end:
// its slot is freed once, by its release.
func TestWarm_RequestEndedBeforeItsReleaseFreesOneSlot(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4))
	// The engine runs three old requests: one slot is free.
	h.at(100 * time.Millisecond)
	h.want("seeded", h.report(EngineLoad{Worker: "a", Running: 3}))
	h.want("the free slot", h.submit(simReq(1, PriorityDefault, 16)), "dispatch 1 a/0")
	h.want("full", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
	h.at(150 * time.Millisecond)
	h.want("first token", h.first(1))
	// Request 1 ends at the engine, which is read before its release
	// arrives: the engine runs the three old requests alone.
	h.at(1100 * time.Millisecond)
	h.want("read before the release", h.report(EngineLoad{Worker: "a", Running: 3, At: simT0.Add(1090 * time.Millisecond)}))
	h.want("release", h.release(1), "dispatch 2 a/0 queued")
	h.wantSeeded("the old requests", 3)
	// The next report runs the old requests and request 2: still full.
	h.at(1500 * time.Millisecond)
	h.want("next report", h.report(EngineLoad{Worker: "a", Running: 4}))
	h.wantSeeded("the old requests, a report later", 3)
	h.want("still full", h.submit(simReq(3, PriorityDefault, 16)), "queue 3")
}
