package sched

import (
	"strconv"
	"testing"
	"time"
)

// simEngine is an engine configuration with every use on.
func simEngine() EngineConfig {
	return EngineConfig{
		MaxAge: 2 * time.Second, Saturation: true, WaitingThreshold: 2, KVThreshold: 0.9,
		WarmStart: true, WarmWait: time.Second, Capacity: true,
	}
}

// report sends one report round read at the current time.
func (h *sim) report(loads ...EngineLoad) []string {
	for i := range loads {
		if loads[i].At.IsZero() {
			loads[i].At = h.now
		}
	}
	return simRender(h.s.ReportLoad(h.now, loads))
}

// rank returns the stats of worker/rank.
func (h *sim) rank(worker string, rank uint32) RankStats {
	h.t.Helper()
	for _, r := range h.s.Stats().Ranks {
		if r.Worker == worker && r.Rank == rank {
			return r
		}
	}
	h.t.Fatalf("no rank %s/%d", worker, rank)
	return RankStats{}
}

func TestEngine_SaturatedWorkerIsPassedOverUntilStale(t *testing.T) {
	cfg := Config{Engine: simEngine()}
	cfg.Engine.WarmStart = false
	cfg.Engine.WaitingThreshold = 4
	h := newSim(t, cfg, simWorker("a", 8), simWorker("b", 8))
	// a's engine has a queue tollgate did not cause.
	h.want("report", h.report(EngineLoad{Worker: "a", Waiting: 5}, EngineLoad{Worker: "b"}))
	for id := uint64(1); id <= 4; id++ {
		h.want("submit", h.submit(simReq(id, PriorityDefault, 16)), "dispatch "+itoa(id)+" b/0")
	}
	// 2.5 s later a's report is stale: bookings alone say a is the
	// least loaded.
	h.at(2500 * time.Millisecond)
	h.want("stale", h.submit(simReq(5, PriorityDefault, 16)), "dispatch 5 a/0")
	if h.rank("a", 0).Engine.Fresh {
		t.Fatal("report still fresh after MaxAge")
	}
}

func TestEngine_BookingsSinceReportCountAsWaiting(t *testing.T) {
	cfg := Config{Engine: simEngine()}
	cfg.Engine.WarmStart = false
	h := newSim(t, cfg, simWorker("a", 8))
	h.report(EngineLoad{Worker: "a", Waiting: 1})
	h.submit(simReq(1, PriorityDefault, 16))
	if r := h.rank("a", 0); r.Engine.Since != 1 || r.Engine.Saturated {
		t.Fatalf("after one booking: since %d saturated %v, want 1 false", r.Engine.Since, r.Engine.Saturated)
	}
	h.submit(simReq(2, PriorityDefault, 16))
	if r := h.rank("a", 0); !r.Engine.Saturated {
		t.Fatal("waiting 1 + 2 booked since > 2 not saturated")
	}
	h.first(2)
	if r := h.rank("a", 0); r.Engine.Since != 1 || r.Engine.Saturated {
		t.Fatalf("after a first token: since %d saturated %v, want 1 false", r.Engine.Since, r.Engine.Saturated)
	}
	// A new report covers request 1: it no longer counts as since.
	h.report(EngineLoad{Worker: "a", Running: 2})
	h.release(1)
	if r := h.rank("a", 0); r.Engine.Since != 0 {
		t.Fatalf("since after a new report = %d, want 0", r.Engine.Since)
	}
}

func TestEngine_WorkerGateQueuesOnSaturationAndReleasesOnReport(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 100, BusyThreshold: simU64(1 << 40)}
	cfg := Config{Policy: PolicyConfig{Root: simProfile(c)}, Engine: simEngine()}
	cfg.Engine.WarmStart = false
	h := newSim(t, cfg, simWorker("a", 8), simWorker("b", 8))
	h.report(EngineLoad{Worker: "a", KVUsage: 0.95}, EngineLoad{Worker: "b", Waiting: 3})
	h.want("all saturated", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	h.at(time.Second)
	h.want("b drained", h.report(EngineLoad{Worker: "a", KVUsage: 0.95}, EngineLoad{Worker: "b"}),
		"dispatch 1 b/0 queued")
}

func TestEngine_WholeFleetOutageFallsBackToBookings(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 100, BusyThreshold: simU64(1 << 40)}
	cfg := Config{Policy: PolicyConfig{Root: simProfile(c)}, Engine: simEngine()}
	cfg.Engine.WarmStart = false
	h := newSim(t, cfg, simWorker("a", 8), simWorker("b", 8))
	h.report(EngineLoad{Worker: "a", Waiting: 9}, EngineLoad{Worker: "b", Waiting: 9})
	h.want("saturated", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	// Every later scrape fails: the rounds carry no loads.
	h.at(time.Second)
	h.want("round 1", h.report())
	h.at(2001 * time.Millisecond)
	h.want("round 2", h.report(), "dispatch 1 b/0 queued")
	h.want("arrival", h.submit(simReq(2, PriorityDefault, 16)), "dispatch 2 a/0")
}

func TestEngine_WarmStartSeedsSlotsFromReports(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	// The first arrivals wait for the first report round.
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	h.want("warming", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
	h.want("warming", h.submit(simReq(3, PriorityDefault, 16)), "queue 3")
	// The engines run 3 requests each that the old leader dispatched:
	// 8 − 6 slots remain.
	h.at(100 * time.Millisecond)
	h.want("seeded", h.report(EngineLoad{Worker: "a", Running: 3}, EngineLoad{Worker: "b", Running: 3}),
		"dispatch 1 b/0 queued", "dispatch 2 a/0 queued")
	if st := h.s.Stats(); st.Seeded != 6 || st.Warming {
		t.Fatalf("seeded %d warming %v, want 6 false", st.Seeded, st.Warming)
	}
	// Our requests produce their first tokens (the engines have surely
	// seen them), then old requests end: the engines report only ours
	// (plus one old on a).
	h.at(500 * time.Millisecond)
	h.want("first tokens", append(h.first(1), h.first(2)...))
	h.at(600 * time.Millisecond)
	h.want("read", h.report(EngineLoad{Worker: "a", Running: 2}, EngineLoad{Worker: "b", Running: 1}))
	if st := h.s.Stats(); st.Seeded != 6 {
		t.Fatalf("seeded %d before the next report, want 6", st.Seeded)
	}
	// The seed falls a report later, once whatever the engines had
	// finished by the 600 ms read has been released here.
	h.at(time.Second)
	h.want("decay", h.report(EngineLoad{Worker: "a", Running: 2}, EngineLoad{Worker: "b", Running: 1}),
		"dispatch 3 b/0 queued")
	if st := h.s.Stats(); st.Seeded != 1 {
		t.Fatalf("seeded %d, want 1", st.Seeded)
	}
	// Reports above the bookings later (outside traffic) do not raise the
	// seed again.
	for _, at := range []time.Duration{1400 * time.Millisecond, 1800 * time.Millisecond} {
		h.at(at)
		h.report(EngineLoad{Worker: "a", Running: 4}, EngineLoad{Worker: "b", Running: 4})
		if st := h.s.Stats(); st.Seeded != 1 {
			t.Fatalf("seeded %d after outside load, want 1", st.Seeded)
		}
	}
}

func TestEngine_ReportDoesNotSeeLaterBookings(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4))
	h.at(100 * time.Millisecond)
	h.report(EngineLoad{Worker: "a", Running: 3})
	h.at(120 * time.Millisecond)
	h.want("one free", h.submit(simReq(1, PriorityDefault, 16)), "dispatch 1 a/0")
	// A scrape read before request 1 was booked arrives after it: the
	// engine's 3 are still the old requests, not request 1 and two old.
	h.at(300 * time.Millisecond)
	h.want("late report", h.report(EngineLoad{Worker: "a", Running: 3, At: simT0.Add(110 * time.Millisecond)}))
	if st := h.s.Stats(); st.Seeded != 3 {
		t.Fatalf("seeded %d, want 3", st.Seeded)
	}
	if r := h.rank("a", 0); r.Engine.Since != 1 {
		t.Fatalf("since %d, want 1 (booked after the scrape)", r.Engine.Since)
	}
	h.want("full", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
}

func TestEngine_WarmStartHoldsUntilEveryRankReported(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	h.at(100 * time.Millisecond)
	h.want("only a reported", h.report(EngineLoad{Worker: "a", Running: 4}))
	h.at(200 * time.Millisecond)
	h.want("b reported", h.report(EngineLoad{Worker: "b", Running: 1}), "dispatch 1 b/0 queued")
}

func TestEngine_WarmStartHoldEndsAfterWarmWait(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4))
	h.want("warming", h.submit(simReq(1, PriorityDefault, 16)), "queue 1")
	at, ok := h.s.NextDeadline()
	if want := simT0.Add(time.Second); !ok || !at.Equal(want) {
		t.Fatalf("NextDeadline = %v %v, want %v", at, ok, want)
	}
	h.at(time.Second)
	h.want("hold over", h.tick(), "dispatch 1 a/0 queued")
}

func TestEngine_ResumeStartsANewWarmStart(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	h := newSim(t, cfg, simWorker("a", 4))
	h.report(EngineLoad{Worker: "a"})
	h.want("led", h.submit(simReq(1, PriorityDefault, 16)), "dispatch 1 a/0")
	h.release(1)
	h.s.Drain(h.now)
	h.s.Resume()
	h.at(time.Second)
	h.want("warming again", h.submit(simReq(2, PriorityDefault, 16)), "queue 2")
	h.want("seeded", h.report(EngineLoad{Worker: "a", Running: 3}), "dispatch 2 a/0 queued")
	h.want("full", h.submit(simReq(3, PriorityDefault, 16)), "queue 3")
}

func TestEngine_CapacityFromReportsWithReservationClamp(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PrioritySystem].ReservedFloor = 6
	})
	cfg.Engine = simEngine()
	cfg.Engine.WarmStart = false
	h := newSim(t, cfg, Worker{ID: "a", DPSize: 2}, simWorker("b", 8))
	if c := h.s.Stats().Capacity; c != DefaultMaxRunningRequests+8 {
		t.Fatalf("capacity %d before reports", c)
	}
	// One rank of a reporting is not enough.
	h.report(EngineLoad{Worker: "a", Rank: 0, MaxRunning: 2})
	if c := h.s.Stats().Capacity; c != DefaultMaxRunningRequests+8 {
		t.Fatalf("capacity %d after a partial report", c)
	}
	h.report(EngineLoad{Worker: "a", Rank: 0, MaxRunning: 2}, EngineLoad{Worker: "a", Rank: 1, MaxRunning: 2},
		EngineLoad{Worker: "b", MaxRunning: 100})
	st := h.s.Stats()
	if st.Capacity != 12 {
		t.Fatalf("capacity %d, want 4 reported + 8 given", st.Capacity)
	}
	if st.Reserved[PrioritySystem] != 6 {
		t.Fatalf("system reservation %d, want 6", st.Reserved[PrioritySystem])
	}
	h.report(EngineLoad{Worker: "a", Rank: 0, MaxRunning: 1}, EngineLoad{Worker: "a", Rank: 1, MaxRunning: 1})
	h.workers(Worker{ID: "a", DPSize: 2})
	if st := h.s.Stats(); st.Capacity != 2 || st.Reserved[PrioritySystem] != 2 {
		t.Fatalf("capacity %d system reservation %d, want 2 2 (clamped)", st.Capacity, st.Reserved[PrioritySystem])
	}
}

func TestEngine_ZeroConfigIgnoresReports(t *testing.T) {
	h := newSim(t, Config{}, simWorker("a", 8), simWorker("b", 8))
	h.report(EngineLoad{Worker: "a", Waiting: 100, KVUsage: 1, MaxRunning: 1})
	h.report(EngineLoad{Worker: "b", Waiting: 100, KVUsage: 1, MaxRunning: 1})
	if r := h.rank("a", 0); r.Engine.Saturated || r.Engine.Fresh {
		t.Fatal("reports used with engine signals off")
	}
	if c := h.s.Stats().Capacity; c != 16 {
		t.Fatalf("capacity %d, want 16", c)
	}
}

func TestEngine_ConfigValidation(t *testing.T) {
	for _, c := range []EngineConfig{{MaxAge: -1}, {WarmWait: -1}, {KVThreshold: -0.1}} {
		if _, err := New(Config{Engine: c}, nil); err == nil {
			t.Errorf("New accepted %+v", c)
		}
	}
}

func itoa(v uint64) string { return string(rune('0' + v)) }

// BenchmarkScheduler_ReportLoad is one report round of 256 workers, every
// use on and requests in flight: the dispatcher's cost per round.
func BenchmarkScheduler_ReportLoad(b *testing.B) {
	const workers = 256
	cfg := simSMG(simZeroFloors)
	cfg.Engine = simEngine()
	ws := make([]Worker, workers)
	loads := make([]EngineLoad, workers)
	for i := range ws {
		ws[i] = Worker{ID: "w" + strconv.Itoa(i), MaxRunningRequests: 64}
		loads[i] = EngineLoad{Worker: ws[i].ID, Waiting: uint32(i % 7), Running: 10, KVUsage: 0.5, KVBlocks: 1000}
	}
	s, err := New(cfg, ws)
	if err != nil {
		b.Fatal(err)
	}
	now := simT0
	s.ReportLoad(now, loads)
	for id := range uint64(1000) {
		s.Submit(now, Request{ID: id, Model: "m", Priority: PriorityDefault, ISL: 256})
	}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		for i := range loads {
			loads[i].At = now
		}
		s.ReportLoad(now, loads)
	}
}
