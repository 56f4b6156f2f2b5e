package sched

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestScheduler_ReleaseQueuedLeavesNoTrace(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, simWorker("w", 8))
	h.want("busy", h.submit(simReq(1, PriorityDefault, 100)), "dispatch 1 w/0")
	h.want("queued", h.submit(simReq(2, PriorityInteractive, 100)), "queue 2")
	h.want("queued", h.submit(simReq(3, PriorityDefault, 300)), "queue 3")
	h.want("cancel the head", h.release(2), "reject 2 client_cancelled queued")
	q := h.s.Stats().Queues[0]
	if q.Requests != 1 || q.ISLTokens != 300 {
		t.Fatalf("queue after one cancel: %+v", q)
	}
	h.want("cancel the last", h.release(3), "reject 3 client_cancelled queued")
	h.want("unknown IDs are ignored", h.release(3))
	h.want("FirstToken of an unknown ID", h.first(42))
	st := h.s.Stats()
	if q := st.Queues[0]; q.Requests != 0 || q.ISLTokens != 0 || q.Deficit != 0 {
		t.Fatalf("queue after cancels: %+v", q)
	}
	if st.Admits[PriorityInteractive][OutcomeClientCancelled] != 1 || st.Admits[PriorityDefault][OutcomeClientCancelled] != 1 {
		t.Fatalf("admits %v", st.Admits)
	}
	if len(h.s.entries) != 1 || st.QueueDepth != [NumPriorities]uint32{} {
		t.Fatalf("%d entries, depth %v", len(h.s.entries), st.QueueDepth)
	}
	h.want("the in-flight one ends", h.release(1))
	if st := h.s.Stats(); st.Ranks[0].ActiveRequests != 0 || st.Ranks[0].ActiveBlocks != 0 || len(h.s.entries) != 0 {
		t.Fatalf("ranks %+v entries %d", st.Ranks, len(h.s.entries))
	}
}

func TestScheduler_ReleaseOfAQueuedRequestCountsClientCancelled(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 1))
	h.submit(simReq(1, PriorityBulk, 8))
	h.want("queued", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
	acts := h.s.Release(simT0.Add(1500*time.Millisecond), 2)
	h.want("released while queued", simRender(acts), "reject 2 client_cancelled queued")
	if acts[0].Wait != 1500*time.Millisecond || acts[0].PolicyClass == "" {
		t.Errorf("the release reports wait %v, class %q; want 1.5s and the queue's class", acts[0].Wait, acts[0].PolicyClass)
	}
	if got := h.s.Stats().Admits[PriorityBulk][OutcomeClientCancelled]; got != 1 {
		t.Fatalf("client_cancelled = %d", got)
	}
}

func TestScheduler_Drain(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 2))
	h.want("1", h.submit(simReq(1, PriorityBulk, 8)), "dispatch 1 w/0")
	h.want("2", h.submit(simReq(2, PriorityBulk, 8)), "dispatch 2 w/0")
	h.want("3 queues", h.submit(simReq(3, PriorityBulk, 8)), "queue 3")
	h.want("4 queues", h.submit(simReq(4, PrioritySystem, 8)), "preempt 2 bulk by system", "queue 4")
	h.want("5 queues", h.submit(simReq(5, PriorityBulk, 8)), "queue 5")
	h.at(time.Second)
	acts := h.s.Drain(h.now)
	h.want("drain: higher classes first, then enqueue order", simRender(acts),
		"reject 4 shutdown queued", "reject 3 shutdown queued", "reject 5 shutdown queued")
	if acts[0].Wait != time.Second {
		t.Fatalf("wait %v", acts[0].Wait)
	}
	h.want("an arrival that must queue", h.submit(simReq(6, PriorityBulk, 8)), "reject 6 shutdown")
	h.want("the victim ends; nobody waits", h.release(2))
	h.want("an arrival that could dispatch at once is refused too", h.submit(simReq(7, PriorityBulk, 8)), "reject 7 shutdown")
	bad := simReq(8, PriorityBulk, 8)
	bad.Pin = &Pin{Worker: "gone"}
	h.want("draining answers before the pin is checked", h.submit(bad), "reject 8 shutdown")
	h.want("a duplicate id is still named as one", h.submit(simReq(1, PriorityBulk, 8)), "reject 1 unknown")
	if st := h.s.Stats(); st.Admits[PriorityBulk][OutcomeShutdown] != 5 || st.InFlight[PriorityBulk] != 1 {
		t.Fatalf("admits %v in flight %v", st.Admits[PriorityBulk], st.InFlight)
	}
	h.s.Resume()
	h.want("after Resume the refused arrival dispatches at once", h.submit(simReq(7, PriorityBulk, 8)), "dispatch 7 w/0")
	h.want("and a later one queues again", h.submit(simReq(9, PriorityBulk, 8)), "queue 9")
	h.want("and is dispatched when a slot frees", h.release(1), "dispatch 9 w/0 queued")
}

func TestScheduler_DuplicateID(t *testing.T) {
	h := newSim(t, Config{}, simWorker("w", 1))
	h.want("first", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	acts := h.s.Submit(h.now, simReq(1, PriorityDefault, 8))
	if len(acts) != 1 || acts[0].Outcome != OutcomeUnknown || !strings.Contains(acts[0].Message, "duplicate request id 1") {
		t.Fatalf("duplicate: %+v", acts)
	}
	if st := h.s.Stats(); st.Ranks[0].ActiveRequests != 1 || st.InFlight[PriorityDefault] != 1 {
		t.Fatalf("the live request was disturbed: %+v", st.Ranks)
	}
}

func TestScheduler_OutOfRangePriority(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 1))
	acts := h.s.Submit(h.now, Request{ID: 1, Model: "m", Priority: 200})
	if len(acts) != 1 || acts[0].Priority != PriorityDefault {
		t.Fatalf("actions %+v", acts)
	}
}

func TestScheduler_StatsAndPressure(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PrioritySystem].ReservedFloor = 2
		pc.Classes[PriorityBulk].QueueSize = 10
	}), simWorker("w", 10))
	if st := h.s.Stats(); st.Pressure != [NumPriorities]float64{} || st.Utilization != 0 {
		t.Fatalf("idle pressure %v utilization %v", st.Pressure, st.Utilization)
	}
	for id := uint64(1); id <= 4; id++ {
		h.submit(simReq(id, PriorityDefault, 32))
	}
	st := h.s.Stats()
	if st.Pressure[PriorityDefault] != 0.5 { // 4 in flight over 10 - 2 reserved above
		t.Fatalf("default pressure %v", st.Pressure[PriorityDefault])
	}
	for id := uint64(5); id <= 16; id++ { // 4 bulk fit, 8 queue
		h.submit(simReq(id, PriorityBulk, 32))
	}
	st = h.s.Stats()
	if st.Pressure[PriorityBulk] != 0.8 || st.QueueDepth[PriorityBulk] != 8 || st.Utilization != 0.8 {
		t.Fatalf("bulk pressure %v depth %v utilization %v", st.Pressure[PriorityBulk], st.QueueDepth, st.Utilization)
	}
	h.workers(simWorker("w", 4))
	st = h.s.Stats()
	if st.Pressure[PriorityDefault] != 1 || st.Pressure[PriorityInteractive] != 0 || st.Utilization != 2 {
		t.Fatalf("after shrink: pressure %v utilization %v", st.Pressure, st.Utilization)
	}
	if st.Capacity != 4 || st.Reserved != [NumPriorities]uint32{0, 0, 0, 2} || st.InFlight != [NumPriorities]uint32{4, 4, 0, 0} {
		t.Fatalf("stats %+v", st)
	}
	r := st.Ranks[0]
	if r.Worker != "w" || r.ActiveRequests != 8 || r.ActivePrefillTokens != 8*32 || r.ActiveBlocks != 8*2 {
		t.Fatalf("rank %+v", r)
	}
	q := st.Queues[0] // only a catch-all worker serves "m": the shared queue
	if q.Model != "" || q.PolicyClass != "default" || q.Requests != 8 || q.ISLTokens != 8*32 {
		t.Fatalf("queue %+v", q)
	}
	if st.QueueLimit[PriorityBulk] != 10 {
		t.Fatalf("limits %v", st.QueueLimit)
	}
}

func TestScheduler_CapacityGrowthDrains(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 1))
	h.submit(simReq(1, PriorityBulk, 8))
	h.want("queued", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
	pinned := simReq(3, PriorityBulk, 8)
	pinned.Pin = &Pin{Worker: "w"}
	h.want("pinned queued", h.submit(pinned), "queue 3")
	h.want("growth drains", h.workers(simWorker("w", 3)), "dispatch 2 w/0 queued", "dispatch 3 w/0 queued")
}

func TestNew_RejectsMalformedConfig(t *testing.T) {
	good := simSampleProfile()
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no classes", func(c *Config) { c.Policy.Root = &Profile{} }, "root profile has no policy classes"},
		{"nil model profile", func(c *Config) { c.Policy.Models = map[string]*Profile{"x": nil} }, `model "x" profile is nil`},
		{"zero quantum", func(c *Config) { c.Policy.Root.Classes[0].Quantum = 0 }, `"cached" quantum must be greater than zero`},
		{"negative fraction", func(c *Config) { c.Policy.Root.Classes[1].BusyThresholdFrac = simF64(-1) }, "fraction must be finite"},
		{"ratio above 1", func(c *Config) { c.Policy.Root.Classes[1].BusyWorkerRatio = 1.5 }, "busy worker ratio"},
		{"unknown default family", func(c *Config) { c.Policy.Root.DefaultFamily = "nope" }, `default family "nope"`},
		{"short matrix row", func(c *Config) { c.Policy.Root.Matrix["latency"] = []int{2} }, `family "latency" has 1 classes for 2 buckets`},
		{"class index out of range", func(c *Config) { c.Policy.Root.Explicit["custom_priority"] = 9 }, "index 9 of 5"},
		{"buckets not from 0", func(c *Config) { c.Policy.Root.Buckets[0].MinTokens = 5 }, "must start at min_tokens 0"},
		{"NaN share", func(c *Config) { c.Priority.Classes[1].ReservedPerSlot = math.NaN() }, "reserved_per_slot must be finite"},
		{"negative temperature", func(c *Config) { c.Selection = &SelectionConfig{Temperature: -1} }, "temperature must be finite"},
		{"too many flows", func(c *Config) { c.Fairness.MaxFlows = MaxFlowsLimit + 1 }, "fairness max flows 65537 must be in [0, 65536]"},
		{"zero weight", func(c *Config) { c.Fairness.Weights = map[string]uint32{"t": 0} }, `fairness weight of "t" is 0, must be in [1, 1000]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := *good
			p.Classes = append([]ClassSpec(nil), good.Classes...)
			p.Buckets = append([]Bucket(nil), good.Buckets...)
			p.Matrix = map[string][]int{"standard": {0, 1}, "latency": {2, 3}}
			p.Explicit = map[string]int{"custom_priority": 4}
			cfg := Config{Policy: PolicyConfig{Root: &p}}
			tt.mod(&cfg)
			_, err := New(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}
