package sched

import (
	"testing"
)

func pdWorker(id string, role Role) Worker { return Worker{ID: id, Role: role} }

func pdReq(id uint64, isl uint64, cached ...CachedTokens) Request {
	return Request{ID: id, Model: "m", ISL: isl, Cached: cached}
}

// A long uncached prompt is split: decode on its destination, prefill on
// the least-loaded prefill worker; short or cached prompts are served whole.
func TestPD_Decider(t *testing.T) {
	h := newSim(t, Config{}, pdWorker("d1", RoleDecode), pdWorker("p1", RolePrefill), pdWorker("p2", RolePrefill))
	h.want("long: split", h.submit(pdReq(1, 1000, CachedTokens{"p1", 10})), "dispatch 1 d1/0 prefill p1/0")
	h.want("long again: the other prefill worker", h.submit(pdReq(2, 900)), "dispatch 2 d1/0 prefill p2/0")
	h.want("short: whole", h.submit(pdReq(3, 511)), "dispatch 3 d1/0")
	h.want("at the threshold: split", h.submit(pdReq(4, 512)), "dispatch 4 d1/0 prefill p2/0")
	h.want("cached on the decode worker: whole", h.submit(pdReq(5, 1000, CachedTokens{"d1", 600})), "dispatch 5 d1/0")
}

// The prefill worker that holds the prefix costs less.
func TestPD_PrefillCache(t *testing.T) {
	h := newSim(t, Config{}, pdWorker("d1", RoleDecode), pdWorker("p1", RolePrefill), pdWorker("p2", RolePrefill))
	h.want("p2 holds 800 of 1000", h.submit(pdReq(1, 1000, CachedTokens{"p2", 800})), "dispatch 1 d1/0 prefill p2/0")
	st := h.s.Stats()
	if p2 := rankOf(t, st, "p2"); p2.ActivePrefillTokens != 200 {
		t.Fatalf("p2 prefill %d, want the 200 uncached there", p2.ActivePrefillTokens)
	}
}

// Both halves are booked and both released: the prefill half at the first
// token, the decode half at the end.
func TestPD_TwoSidedBooking(t *testing.T) {
	h := newSim(t, Config{}, pdWorker("d1", RoleDecode), pdWorker("p1", RolePrefill))
	h.submit(pdReq(1, 1024))
	d, p := rankOf(t, h.s.Stats(), "d1"), rankOf(t, h.s.Stats(), "p1")
	if d.ActivePrefillTokens != 0 || d.ActiveRequests != 1 || d.ActiveBlocks != 64 || p.ActivePrefillTokens != 1024 || p.ActiveRequests != 0 {
		t.Fatalf("booked decode %+v prefill %+v", d, p)
	}
	h.first(1)
	if p := rankOf(t, h.s.Stats(), "p1"); p.ActivePrefillTokens != 0 {
		t.Fatalf("prefill half after the first token: %+v", p)
	}
	h.release(1)
	if d := rankOf(t, h.s.Stats(), "d1"); d.ActiveRequests != 0 || d.ActiveBlocks != 0 {
		t.Fatalf("decode half after the end: %+v", d)
	}
	h.submit(pdReq(2, 1024))
	h.release(2) // ended before its first token (a reset): both halves go
	if d, p := rankOf(t, h.s.Stats(), "d1"), rankOf(t, h.s.Stats(), "p1"); d.ActiveRequests != 0 || p.ActivePrefillTokens != 0 {
		t.Fatalf("after a reset: decode %+v prefill %+v", d, p)
	}
}

// A prefill-role worker is never a destination, pinned or not.
func TestPD_PrefillWorkerIsNoDestination(t *testing.T) {
	h := newSim(t, Config{}, pdWorker("p1", RolePrefill))
	h.want("only prefill workers", h.submit(pdReq(1, 1000)), "reject 1 no_endpoints")
	pinned := pdReq(2, 10)
	pinned.Pin = &Pin{Worker: "p1"}
	h.want("pinned to one", h.submit(pinned), "reject 2 pin_invalid")
}

// With a busy threshold, a request that will be split waits for a prefill
// worker, not for its decode worker.
func TestPD_GateOnPrefill(t *testing.T) {
	root := simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})
	h := newSim(t, Config{Policy: PolicyConfig{Root: root}}, pdWorker("d1", RoleDecode), pdWorker("p1", RolePrefill))
	h.want("split", h.submit(pdReq(1, 1000)), "dispatch 1 d1/0 prefill p1/0")
	h.want("short: the decode worker has no prefill booked", h.submit(pdReq(2, 100)), "dispatch 2 d1/0")
	h.want("long: the prefill worker is busy", h.submit(pdReq(3, 1000)), "queue 3")
	h.want("first token of 1 frees it", h.first(1), "dispatch 3 d1/0 prefill p1/0 queued")
}

// Without prefill-role workers nothing is split, whatever the prompt.
func TestPD_AggregatedFleet(t *testing.T) {
	h := newSim(t, Config{PDThreshold: 1}, pdWorker("a", RoleBoth), pdWorker("d", RoleDecode))
	for id := uint64(1); id <= 4; id++ {
		acts := h.s.Submit(h.now, pdReq(id, 5000))
		if acts[0].Prefill.Worker != "" {
			t.Fatalf("split in an aggregated fleet: %v", simRender(acts))
		}
	}
}

func rankOf(t *testing.T, st Stats, worker string) RankStats {
	t.Helper()
	for _, r := range st.Ranks {
		if r.Worker == worker {
			return r
		}
	}
	t.Fatalf("no rank of %s in %+v", worker, st.Ranks)
	return RankStats{}
}

// A preempted split request releases both halves.
func TestPD_PreemptedVictimReleasesBothHalves(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	d := pdWorker("d1", RoleDecode)
	d.MaxRunningRequests = 1
	h := newSim(t, cfg, d, pdWorker("p1", RolePrefill))
	h.want("bulk, split", h.submit(Request{ID: 1, Model: "m", Priority: PriorityBulk, ISL: 1000}), "dispatch 1 d1/0 prefill p1/0")
	h.want("interactive preempts it", h.submit(Request{ID: 2, Model: "m", Priority: PriorityInteractive, ISL: 1000}),
		"preempt 1 bulk by interactive", "queue 2")
	h.want("the victim's end", h.release(1), "dispatch 2 d1/0 prefill p1/0 queued")
	h.finish(2)
	for _, r := range h.s.Stats().Ranks {
		if r.ActivePrefillTokens != 0 || r.ActiveRequests != 0 || r.ActiveBlocks != 0 {
			t.Fatalf("rank %s left booked: %+v", r.Worker, r)
		}
	}
}
