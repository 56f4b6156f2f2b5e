package sched

import (
	"testing"
)

// premiumRegular is the result of one arm of the upstream premium/regular
// regression workload.
type premiumRegular struct {
	premiumOfFirst320 int // premium completions among the first 320
	regularLeft       int // regular requests not completed when premium's 320th completes
}

// runPremiumRegular reproduces tests/router/test_policy_class.py in the core:
// one worker with 4 slots (max_num_seqs 4; with slots set, the SMG slot pool
// is 4 with no reservations, otherwise only the busy gate limits dispatch,
// as upstream), busy threshold 1536 on both classes, request limit 1024 per
// worker, 320 requests per class of exactly 512 uncached tokens released at
// once (even indexes send premium first, odd ones regular first), and a
// worker that serves its four requests in dispatch order and finishes each
// with its first (and only) token.
func runPremiumRegular(t *testing.T, regularQuantum uint64, slots bool) premiumRegular {
	t.Helper()
	class := func(name string, quantum uint64) ClassSpec {
		return ClassSpec{
			Name: name, Family: name, Bucket: "all", Quantum: quantum,
			BusyThreshold: simU64(1536), RequestLimitPerWorker: simU64(1024),
		}
	}
	profile := &Profile{
		Classes:       []ClassSpec{class("premium", 512), class("regular", regularQuantum)},
		Buckets:       []Bucket{{0, "all"}},
		DefaultFamily: "regular",
		Matrix:        map[string][]int{"premium": {0}, "regular": {1}},
	}
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 1024
	})
	cfg.Policy.Root = profile
	cfg.Priority.Enabled = slots
	h := newSim(t, cfg, Worker{ID: "mocker", MaxRunningRequests: 4, MaxBatchedTokens: 8192})

	classOf := map[uint64]string{}
	var running []uint64 // in dispatch order: the worker's service order
	onActions := func(acts []Action) {
		for _, a := range acts {
			// This experiment measures service order; queuing is checked
			// by the exact-sequence tests, so its report is skipped here.
			if a.Kind == ActionQueue {
				continue
			}
			if a.Kind != ActionDispatch {
				t.Fatalf("unexpected action %v", simRender([]Action{a}))
			}
			running = append(running, a.ID)
		}
	}
	for i := range 320 {
		order := []string{"premium", "regular"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, c := range order {
			id := uint64(1000 + 2*i)
			if c == "regular" {
				id++
			}
			classOf[id] = c
			onActions(h.s.Submit(h.now, Request{ID: id, Model: "mock", Class: c, Priority: PriorityDefault, ISL: 512}))
		}
	}
	if len(running) != 4 {
		t.Fatalf("%d dispatched at once, want 4", len(running))
	}
	var res premiumRegular
	completed := map[string]int{}
	for len(running) > 0 {
		id := running[0]
		running = running[1:]
		onActions(h.s.FirstToken(h.now, id))
		onActions(h.s.Release(h.now, id))
		completed[classOf[id]]++
		if completed["premium"]+completed["regular"] == 320 {
			res.premiumOfFirst320 = completed["premium"]
		}
		if classOf[id] == "premium" && completed["premium"] == 320 {
			res.regularLeft = 320 - completed["regular"]
		}
	}
	if completed["premium"] != 320 || completed["regular"] != 320 {
		t.Fatalf("completed %v, want 320 each", completed)
	}
	return res
}

func TestExperiment_PremiumRegular(t *testing.T) {
	for _, slots := range []bool{true, false} {
		name := map[bool]string{true: "slot gate and worker gate", false: "worker gate only"}[slots]
		t.Run(name, func(t *testing.T) {
			weighted := runPremiumRegular(t, 128, slots)
			equal := runPremiumRegular(t, 512, slots)
			t.Logf("weighted 512:128: premium %d of the first 320, regular left %d", weighted.premiumOfFirst320, weighted.regularLeft)
			t.Logf("equal 512:512: premium %d of the first 320, regular left %d", equal.premiumOfFirst320, equal.regularLeft)
			checkPremiumRegular(t, weighted, equal)
		})
	}
}

// checkPremiumRegular applies the upstream assertions plus a tighter bound
// around the ideal split.
func checkPremiumRegular(t *testing.T, weighted, equal premiumRegular) {
	t.Helper()
	// The ideal split is 256:64; the first four requests dispatch before
	// any queueing (two of each class).
	if d := weighted.premiumOfFirst320 - 256; d < -4 || d > 4 {
		t.Errorf("weighted: premium %d of the first 320, want 256±4", weighted.premiumOfFirst320)
	}
	if d := equal.premiumOfFirst320 - 160; d < -4 || d > 4 {
		t.Errorf("equal: premium %d of the first 320, want 160±4", equal.premiumOfFirst320)
	}
	if weighted.premiumOfFirst320 < 240 || 320-weighted.premiumOfFirst320 < 48 {
		t.Errorf("weighted split %d:%d", weighted.premiumOfFirst320, 320-weighted.premiumOfFirst320)
	}
	if weighted.regularLeft < 220 || weighted.regularLeft > 260 {
		t.Errorf("weighted: %d regular left when premium drained, want 220..260", weighted.regularLeft)
	}
	if equal.regularLeft > 20 {
		t.Errorf("equal: %d regular left when premium drained, want <= 20", equal.regularLeft)
	}
	if weighted.premiumOfFirst320-equal.premiumOfFirst320 < 60 || weighted.regularLeft-equal.regularLeft < 200 {
		t.Errorf("weighted vs equal: %+v vs %+v", weighted, equal)
	}
}
