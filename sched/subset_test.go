package sched

import (
	"strings"
	"testing"
)

// The endpoint subset (Request.AllowedWorkers) is part of eligibility: it
// restricts selection, the worker gate, pins and Route, as the required
// taints do. The vectors mirror the Gateway API Inference Extension's
// hermetic suite (test/integration/epp/hermetic_test.go:239-272 at
// 1748e829) at the scheduler's level.

func subsetReq(id uint64, allowed ...string) Request {
	r := simReq(id, PriorityDefault, 1000)
	r.AllowedWorkers = allowed
	return r
}

func TestSubset_RestrictsSelection(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "b"}, Worker{ID: "c"})
	h.s.byID["b"].ranks[0].blocks = 10
	h.s.byID["c"].ranks[0].blocks = 20
	// "select best from subset": b beats c inside {b, c}, although a is idle.
	h.want("best of the subset", h.submit(subsetReq(1, "b", "c")), "dispatch 1 b/0")
	// "partial match": only c is allowed, despite its load.
	h.want("single member", h.submit(subsetReq(2, "c")), "dispatch 2 c/0")
	// IDs outside the worker set are ignored; the rest still restricts.
	h.want("unknown ids ignored", h.submit(subsetReq(3, "ghost", "c")), "dispatch 3 c/0")
	// Without a subset, the idle a wins.
	h.want("no subset", h.submit(subsetReq(4)), "dispatch 4 a/0")
}

func TestSubset_NoMemberIsNoEndpoints(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a", Model: "m"}, Worker{ID: "b", Model: "other"})
	acts := h.s.Submit(h.now, subsetReq(1, "b", "ghost"))
	h.want("no member serves the model", simRender(acts), "reject 1 no_endpoints")
	if msg := acts[0].Message; !strings.Contains(msg, "endpoint subset") {
		t.Fatalf("message %q does not name the endpoint subset", msg)
	}
	if w, _, ok := h.s.RouteIn("m", []string{"b"}); ok {
		t.Fatalf("RouteIn chose %s outside the eligible subset", w)
	}
	if w, _, ok := h.s.RouteIn("", []string{"b"}); !ok || w != "b" {
		t.Fatalf("RouteIn = %s %v, want b", w, ok)
	}
}

func TestSubset_PinOutsideSubset(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "b"})
	r := subsetReq(1, "b")
	r.Pin = &Pin{Worker: "a"}
	acts := h.s.Submit(h.now, r)
	h.want("pin outside the subset", simRender(acts), "reject 1 pin_invalid")
	if want := "Pinned worker a dp_rank 0 is not eligible: worker a is outside the request's endpoint subset"; acts[0].Message != want {
		t.Fatalf("message %q, want %q", acts[0].Message, want)
	}
	r = subsetReq(2, "b")
	r.Pin = &Pin{Worker: "b"}
	h.want("pin inside the subset", h.submit(r), "dispatch 2 b/0")
}

func TestSubset_WorkerGateCountsOnlyTheSubset(t *testing.T) {
	cfg := Config{Policy: PolicyConfig{Root: simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})}}
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	h.want("b busy", h.submit(subsetReq(1, "b")), "dispatch 1 b/0")
	// a is idle, but the subset allows only the busy b: the request waits.
	h.want("waits for its subset", h.submit(subsetReq(2, "b")), "queue 2")
	// An unrestricted request behind it queues in the same lane, as
	// behind a request waiting for a tainted worker (FIFO within a class).
	h.want("others queue behind it", h.submit(subsetReq(3)), "queue 3")
	h.want("b frees", h.first(1), "dispatch 2 b/0 queued", "dispatch 3 a/0 queued")
}

func TestSubset_WorkerLeavingTheSetRejectsQueued(t *testing.T) {
	cfg := Config{Policy: PolicyConfig{Root: simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})}}
	h := newSim(t, cfg, simWorker("a", 4), simWorker("b", 4))
	h.want("b busy", h.submit(subsetReq(1, "b")), "dispatch 1 b/0")
	h.want("waits for b", h.submit(subsetReq(2, "b")), "queue 2")
	h.want("b leaves", h.workers(simWorker("a", 4)), "reject 2 no_endpoints queued")
}
