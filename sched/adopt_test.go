package sched

import (
	"testing"
	"time"
)

// resumed is simReq re-registered after a change of scheduler, with its
// original arrival at simT0+arrival.
func resumed(id uint64, p Priority, isl uint64, arrival time.Duration) Request {
	r := simReq(id, p, isl)
	r.Resumed, r.Arrival = true, simT0.Add(arrival)
	return r
}

func (h *sim) adopt(r Request, b Booking) []string { return simRender(h.s.Adopt(h.now, r, b)) }

func TestAdopt_BooksLoadAndSlot(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("a", 2), simWorker("b", 1))
	h.at(10 * time.Second)
	h.want("adopt dispatches nothing", h.adopt(simReq(1, PriorityDefault, 100), Booking{Worker: "a"}))
	h.want("adopt with its first token", h.adopt(simReq(2, PriorityDefault, 100), Booking{Worker: "a", FirstToken: true}))
	st := h.s.Stats()
	if st.InFlight[PriorityDefault] != 2 {
		t.Fatalf("in flight %v, want 2 default", st.InFlight)
	}
	a := rankOf(t, st, "a")
	if a.ActiveRequests != 2 || a.ActivePrefillTokens != 100 {
		t.Fatalf("rank a %+v: want 2 requests, the prefill of 1 only", a)
	}
	h.want("the last slot", h.submit(simReq(3, PriorityDefault, 100)), "dispatch 3 b/0")
	h.want("no slot left", h.submit(simReq(4, PriorityDefault, 100)), "queue 4")
	h.want("an adopted request's end frees its slot", h.finish(1), "dispatch 4 a/0 queued")
	h.want("a duplicate id", h.adopt(simReq(2, PriorityDefault, 100), Booking{Worker: "a"}), "reject 2 unknown")
}

func TestAdopt_OutsideTheSet(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("a", 1))
	h.want("unknown worker", h.adopt(simReq(1, PriorityDefault, 100), Booking{Worker: "gone"}))
	h.want("rank out of range", h.adopt(simReq(2, PriorityDefault, 100), Booking{Worker: "a", Rank: 3}))
	if st := h.s.Stats(); st.InFlight[PriorityDefault] != 0 || len(h.s.entries) != 0 {
		t.Fatalf("adopted outside the set: %v in flight, %d entries", st.InFlight, len(h.s.entries))
	}
	h.want("its end is ignored", h.release(1))
	h.want("the slot is free", h.submit(simReq(3, PriorityDefault, 100)), "dispatch 3 a/0")
}

func TestAdopt_PastCapacity(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("a", 1))
	h.adopt(simReq(1, PriorityDefault, 10), Booking{Worker: "a"})
	h.adopt(simReq(2, PriorityDefault, 10), Booking{Worker: "a"})
	if st := h.s.Stats(); st.InFlight[PriorityDefault] != 2 || st.Capacity != 1 {
		t.Fatalf("in flight %v at capacity %d, want 2 past 1", st.InFlight, st.Capacity)
	}
	h.want("queued behind both", h.submit(simReq(3, PriorityDefault, 10)), "queue 3")
	h.want("one end is not enough", h.finish(1))
	h.want("the second is", h.finish(2), "dispatch 3 a/0 queued")
}

func TestAdopt_SplitRequest(t *testing.T) {
	cfg := Config{PDThreshold: 1}
	h := newSim(t, cfg, Worker{ID: "d", MaxRunningRequests: 4, Role: RoleDecode}, Worker{ID: "p", MaxRunningRequests: 4, Role: RolePrefill})
	h.adopt(simReq(1, PriorityDefault, 300), Booking{Worker: "d", Prefill: RankRef{Worker: "p"}})
	st := h.s.Stats()
	if d, p := rankOf(t, st, "d"), rankOf(t, st, "p"); d.ActiveRequests != 1 || d.ActivePrefillTokens != 0 || p.ActivePrefillTokens != 300 {
		t.Fatalf("decode %+v, prefill %+v: want the request on d, its prefill on p", d, p)
	}
	h.want("first token", h.first(1))
	if p := rankOf(t, h.s.Stats(), "p"); p.ActivePrefillTokens != 0 {
		t.Fatalf("prefill %+v after the first token", p)
	}
	h.want("end", h.release(1))
}

func TestAdopt_LegacyToken(t *testing.T) {
	h := newSim(t, Config{Admission: AdmissionConfig{Capacity: 1, QueueSize: 4, QueueTimeout: time.Minute}}, simWorker("w", 64))
	h.adopt(simReq(1, PriorityDefault, 10), Booking{Worker: "w"})
	h.want("the adopted request holds the only token", h.submit(simReq(2, PriorityDefault, 10)), "queue 2")
	h.want("its end hands it on", h.release(1), "dispatch 2 w/0 queued")
	if st := h.s.Stats().Admission; st.Holding != 1 || st.Waiting != 0 {
		t.Fatalf("admission %+v", st)
	}
}

func TestResumed_KeepsArrivalOrder(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 1))
	h.at(time.Second)
	h.want("fill", h.submit(simReq(1, PriorityDefault, 10)), "dispatch 1 w/0")
	h.at(5 * time.Second)
	h.want("a new arrival", h.submit(simReq(2, PriorityDefault, 10)), "queue 2")
	h.want("an older one re-registered", h.submit(resumed(3, PriorityDefault, 10, 2*time.Second)), "queue 3")
	h.want("the older goes first", h.finish(1), "dispatch 3 w/0 queued")
	h.want("then the newer", h.finish(3), "dispatch 2 w/0 queued")
}

func TestResumed_QueueTimeoutFromArrival(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].StarvationThreshold = time.Hour
	}), simWorker("w", 1))
	h.submit(simReq(1, PriorityDefault, 10))
	h.at(50 * time.Second)
	h.want("queued at 50s, arrived at 1s", h.submit(resumed(2, PriorityDefault, 10, time.Second)), "queue 2")
	if at, _ := h.s.NextDeadline(); at != simT0.Add(61*time.Second) {
		t.Fatalf("NextDeadline %v, want 61s: 60s after its arrival", at.Sub(simT0))
	}
	h.at(61 * time.Second)
	h.want("times out 60s after its arrival", h.tick(), "reject 2 queue_timeout queued")
}

func TestResumed_StarvingOnArrival(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].StarvationThreshold = 10 * time.Second
	}), simWorker("w", 1))
	h.submit(simReq(1, PriorityDefault, 10))
	h.at(time.Second)
	h.want("bulk", h.submit(simReq(2, PriorityBulk, 10)), "queue 2")
	h.at(20 * time.Second)
	h.want("2 starves", h.tick())
	h.want("an older bulk request re-registered", h.submit(resumed(3, PriorityBulk, 10, 500*time.Millisecond)), "queue 3")
	if e := h.s.entries[3]; !e.promoted {
		t.Fatal("a resumed request older than a promoted one is not promoted")
	}
	h.want("it starved longest", h.finish(1), "dispatch 3 w/0 queued")
}

func TestResumed_SkipsBucketAndBudgets(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Admission = AdmissionConfig{Capacity: 1, RatePerSecond: 1}
	cfg.TenantBudgets = &TenantBudgets{Default: BudgetPolicy{RequestsPerMinute: 1, TokensPerMinute: 1000}}
	h := newSim(t, cfg, simWorker("w", 64))
	r := simReq(1, PriorityDefault, 10)
	r.Tenant = "t"
	h.want("takes the token and the budget", h.submit(r), "dispatch 1 w/0")
	r = resumed(2, PriorityDefault, 10, 0)
	r.Tenant = "t"
	h.want("re-registered: neither charged again", h.submit(r), "dispatch 2 w/0")
	r = simReq(3, PriorityDefault, 10)
	r.Tenant = "t"
	h.want("a new arrival meets the empty bucket", h.submit(r), "reject 3 rate_limited")
}
