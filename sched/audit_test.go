package sched

// Audit tests against the references and the project's decisions: each
// pins down a discrepancy the audit found and fixed, confirms behaviour the
// other tests covered thinly, or (TestAudit_KnownDeviations) records a
// deviation left in place. Test and subtest names state the rule checked.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// auditPinned is a request of class p pinned to worker w.
func auditPinned(id uint64, p Priority, w string) Request {
	r := simReq(id, p, 16)
	r.Pin = &Pin{Worker: w}
	return r
}

// A pinned arrival that becomes the head of an exact lane blocked by the
// slot gate must be tested: the slot gate depends on the head's priority
// class, unlike Dynamo's worker gate, which is the same for every entry of
// a lane. Package invariant: every call leaves no queued entry
// dispatchable.
//
// Setup: capacity 178 with the default reservations, so bulk has no free
// slot while interactive has plenty; a class that is busy with any load.
// Interactive 1 makes w2 busy and interactive 2 waits on it, so a dispatch
// pass runs when bulk 3 (pinned to the idle w1) queues: the pass finds bulk
// 3 blocked by the slot gate alone and blocks lane w1. Request 4, pinned
// to w1 as well, becomes that lane's head and used to wait there until some
// request ended (or its own queue timeout), with w1 idle and slots free.
func TestAudit_NewHeadOfASlotBlockedLaneIsTested(t *testing.T) {
	tests := []struct {
		name string
		prio Priority
		want []string
	}{
		{"interactive head passes the slot gate", PriorityInteractive, []string{"dispatch 4 w1/0 queued"}},
		{"default head passes the slot gate", PriorityDefault, []string{"dispatch 4 w1/0 queued"}},
		{"another bulk request stays queued", PriorityBulk, []string{"queue 4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := simSMG(nil)
			cfg.Policy.Root = simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})
			h := newSim(t, cfg, simWorker("w1", 89), simWorker("w2", 89))
			h.want("w2 busy", h.submit(auditPinned(1, PriorityInteractive, "w2")), "dispatch 1 w2/0")
			h.want("waits for w2", h.submit(auditPinned(2, PriorityInteractive, "w2")), "queue 2")
			h.want("bulk has no free slot", h.submit(auditPinned(3, PriorityBulk, "w1")), "queue 3")
			h.want("the new head of w1's lane", h.submit(auditPinned(4, tt.prio, "w1")), tt.want...)
		})
	}
	t.Run("a lane blocked by the worker gate stays blocked for a new head", func(t *testing.T) {
		cfg := simSMG(simZeroFloors)
		cfg.Policy.Root = simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})
		h := newSim(t, cfg, simWorker("w", 8))
		h.want("busy the rank", h.submit(auditPinned(1, PriorityBulk, "w")), "dispatch 1 w/0")
		h.want("queued on the busy rank", h.submit(auditPinned(2, PriorityBulk, "w")), "queue 2")
		h.want("a better head is still blocked by the busy rank", h.submit(auditPinned(3, PriorityInteractive, "w")), "queue 3")
		h.want("the rank frees: the better head goes first", h.first(1), "dispatch 3 w/0 queued")
	})
}

// smg_scheduler_starvation_promotion_total counts a successful promotion:
// a starving head admitted through the reservation-ignoring acquire (SMG
// reference §10, §15). A request that passed its starvation threshold but
// then timed out, or was cancelled, was never promoted into a slot.
func TestAudit_PromotionCountedOnlyWhenAdmitted(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].StarvationThreshold = time.Second
		pc.Classes[PriorityBulk].QueueTimeout = 3 * time.Second
	})
	h := newSim(t, cfg, simWorker("w", 1))
	h.want("bulk 1 holds the only slot", h.submit(simReq(1, PriorityBulk, 8)), "dispatch 1 w/0")
	h.want("bulk 2 queues", h.submit(simReq(2, PriorityBulk, 8)), "queue 2")
	h.want("bulk 3 queues", h.submit(simReq(3, PriorityBulk, 8)), "queue 3")
	h.at(2*time.Second).want("past the threshold, but no slot", h.tick())
	h.want("a starving request that is cancelled", h.release(3), "reject 3 client_cancelled queued")
	h.at(3*time.Second).want("times out", h.tick(), "reject 2 queue_timeout queued")
	if got := h.s.Stats().Promotions[PriorityBulk]; got != 0 {
		t.Fatalf("promotions = %d after a timeout and a cancel, want 0", got)
	}
	h.want("bulk 4 queues", h.submit(simReq(4, PriorityBulk, 8)), "queue 4")
	h.at(5*time.Second).want("promoted, still no slot", h.tick())
	h.want("the slot frees: the promoted request is admitted", h.release(1), "dispatch 4 w/0 queued")
	if got := h.s.Stats().Promotions[PriorityBulk]; got != 1 {
		t.Fatalf("promotions = %d, want 1", got)
	}
}

// With workers that serve every model, the model name is the client's
// choice. Each name used to create a queue kept for the scheduler's life,
// and a Stats entry per class: memory and metric series without bound. A
// name that neither the policy file nor a worker names shares the queue of
// the empty model name from the first request on.
func TestAudit_ModelQueuesAreBounded(t *testing.T) {
	cfg := Config{Policy: PolicyConfig{Models: map[string]*Profile{"configured": SyntheticProfile(nil, WSPT)}}}
	h := newSim(t, cfg, Worker{ID: "any"}, Worker{ID: "x", Model: "x"})
	for i := range uint64(300) {
		acts := h.s.Submit(h.now, Request{ID: i, Model: fmt.Sprintf("name-%d", i), ISL: 8})
		if len(acts) != 1 || acts[0].Kind != ActionDispatch || acts[0].Worker != "any" {
			t.Fatalf("request %d: %v", i, simRender(acts))
		}
		if want := fmt.Sprintf("name-%d", i); acts[0].Model != want {
			t.Fatalf("request %d: action model %q, want %q", i, acts[0].Model, want)
		}
		h.s.Release(h.now, i)
	}
	if n := len(h.s.models); n != 1 {
		t.Fatalf("%d model queues, want only the shared one", n)
	}
	if n := len(h.s.Stats().Queues); n != 1 {
		t.Fatalf("%d queue stats, want 1", n)
	}
	for _, model := range []string{"x", "configured"} {
		h.s.Submit(h.now, Request{ID: 1 << 40, Model: model, ISL: 8})
		h.s.Release(h.now, 1<<40)
		if mq := h.s.models[model]; mq == nil || mq.name != model {
			t.Errorf("model %q named by a worker or the policy file has no queue of its own", model)
		}
	}
	if mq := h.s.models["configured"]; mq != nil && mq.profile != cfg.Policy.Models["configured"] {
		t.Error("the configured model lost its profile")
	}
}

// A name nothing configured names shares the empty name's queue but keeps
// its own eligibility, pin validation, limits and rejection texts.
func TestAudit_OverflowNamesKeepTheirOwnEligibility(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}},
		Worker{ID: "any", Taints: []string{"t"}}, Worker{ID: "x", Model: "x"})
	id := uint64(1 << 40)
	req := func(model string, taints ...string) Request {
		id++
		return Request{ID: id, Model: model, ISL: 8, RequiredTaints: taints}
	}
	acts := h.s.Submit(h.now, req("overflow", "t"))
	h.want("an overflow name is served by the catch-all worker", simRender(acts), fmt.Sprintf("dispatch %d any/0", id))
	if acts[0].Model != "overflow" {
		t.Fatalf("action model %q", acts[0].Model)
	}
	busy := id
	acts = h.s.Submit(h.now, req("overflow2", "u"))
	if len(acts) != 1 || acts[0].Outcome != OutcomeNoEndpoints ||
		strings.Contains(acts[0].Message, "overflow2") || acts[0].Model != "overflow2" {
		t.Fatalf("no worker carries the taint: %v", simRender(acts))
	}
	h.want("queued behind the busy catch-all worker", h.submit(req("overflow3", "t")), "queue 1099511627779")
	if h.s.models["overflow3"] != nil || h.s.models[""] == nil || h.s.models[""].ring.len() != 1 {
		t.Fatal("the overflow name was not queued in the shared queue")
	}
	pinned := req("overflow4")
	pinned.Pin = &Pin{Worker: "x"}
	acts = h.s.Submit(h.now, pinned)
	if len(acts) != 1 || acts[0].Outcome != OutcomePinInvalid {
		t.Fatalf("worker x does not serve overflow4: %v", simRender(acts))
	}
	h.want("the catch-all worker frees", h.first(busy), fmt.Sprintf("dispatch %d any/0 queued", busy+2))
}

// Worker input that would otherwise allocate without bound or silently
// drop a pin.
func TestAudit_WorkerInputBounds(t *testing.T) {
	t.Run("New rejects more DP ranks than MaxDPSize", func(t *testing.T) {
		_, err := New(Config{}, []Worker{{ID: "w", DPSize: MaxDPSize + 1}})
		if err == nil || !strings.Contains(err.Error(), "dp_size") {
			t.Fatalf("New error = %v", err)
		}
		if _, err := New(Config{}, []Worker{{ID: "w", DPSize: MaxDPSize}}); err != nil {
			t.Fatalf("New at the bound: %v", err)
		}
	})
	t.Run("SetWorkers ignores a worker with more than MaxDPSize ranks", func(t *testing.T) {
		h := newSim(t, Config{}, Worker{ID: "a"})
		h.want("set", h.workers(Worker{ID: "a"}, Worker{ID: "huge", DPSize: math.MaxUint32}))
		if st := h.s.Stats(); len(st.Ranks) != 1 || st.Capacity != DefaultMaxRunningRequests {
			t.Fatalf("ranks %d capacity %d", len(st.Ranks), st.Capacity)
		}
	})
	t.Run("a pin naming the empty worker id is invalid, not dropped", func(t *testing.T) {
		h := newSim(t, Config{}, Worker{ID: ""}, Worker{ID: "b"})
		r := simReq(1, PriorityDefault, 8)
		r.Pin = &Pin{Worker: "", HasRank: true}
		acts := h.s.Submit(h.now, r)
		if len(acts) != 1 || acts[0].Outcome != OutcomePinInvalid {
			t.Fatalf("actions %v", simRender(acts))
		}
	})
}

// The entry pool keeps each entry's taint and cache-hit buffers for reuse.
// RequiredTaints comes from the request body (up to the body limit), so a
// burst of requests with huge lists must not leave that memory in the pool
// for the scheduler's life.
func TestAudit_PoolDropsOversizedBuffers(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "w", Taints: []string{"t"}})
	big := make([]string, 100_000)
	for i := range big {
		big[i] = "t"
	}
	hits := make([]CachedTokens, 100_000)
	r := simReq(1, PriorityDefault, 8)
	r.RequiredTaints, r.Cached = big, hits
	h.want("dispatch", h.submit(r), "dispatch 1 w/0")
	h.want("done", h.release(1))
	for e := h.s.pool; e != nil; e = e.next {
		if cap(e.taints) > maxPooledEntryBuf || cap(e.cachedTokens) > maxPooledEntryBuf {
			t.Fatalf("pooled entry keeps buffers of %d taints and %d hits", cap(e.taints), cap(e.cachedTokens))
		}
	}
	small := simReq(2, PriorityDefault, 8)
	small.RequiredTaints = []string{"t"}
	h.want("the pooled entry is reused", h.submit(small), "dispatch 2 w/0")
}

// Deficit arithmetic saturates (Dynamo reference §5.3, §10): quantum ×
// rounds and the addition to the deficit stop at the largest uint64 instead
// of wrapping, and the loser of the final scan keeps its bulk credit.
func TestAudit_DeficitSaturates(t *testing.T) {
	const half = uint64(1) << 63
	f := newRingFixture(t, quantumSpec("a", half), quantumSpec("b", half))
	f.push(0, math.MaxUint64)
	f.push(1, math.MaxUint64)
	f.push(1, 5)
	if got, _ := f.pop(popAll); got != "a" {
		t.Fatalf("first pop %s, want a", got)
	}
	if d := f.deficits(); d[0] != 0 || d[1] != math.MaxUint64 {
		t.Fatalf("deficits %v: a empties to 0, b keeps its saturated bulk credit", d)
	}
	if got, _ := f.pop(popAll); got != "b" {
		t.Fatalf("second pop %s, want b without a new quantum", got)
	}
	if d := f.deficits(); d[1] != 0 {
		t.Fatalf("deficits %v: b pays the full cost", d)
	}
}

// Per-worker limits multiply by worker instances serving the model, not DP
// ranks, with a saturating multiplication (Dynamo reference §4.5, §9.7).
func TestAudit_LimitsCountInstancesAndSaturate(t *testing.T) {
	tests := []struct {
		name    string
		class   ClassSpec
		workers []Worker
		want    []string // the actions of three arrivals once every rank is busy
	}{
		{
			name:    "instances, not ranks",
			class:   ClassSpec{RequestLimitPerWorker: simU64(1)},
			workers: []Worker{{ID: "w", DPSize: 4}},
			want:    []string{"queue 101", "reject 102 class_limit requests 1>=1", "reject 103 class_limit requests 1>=1"},
		},
		{
			name:    "2^63 per worker × 2 saturates instead of wrapping to 0",
			class:   ClassSpec{RawISLLimitPerWorker: simU64(1 << 63)},
			workers: []Worker{{ID: "a"}, {ID: "b"}},
			want:    []string{"queue 101", "queue 102", "queue 103"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.class
			c.Name, c.Quantum, c.BusyThreshold = "c", 1, simU64(0)
			h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, tt.workers...)
			ranks := 0
			for _, w := range tt.workers {
				ranks += int(max(w.DPSize, 1))
			}
			for i := range ranks {
				if got := h.submit(simReq(uint64(i+1), PriorityDefault, 8)); len(got) != 1 {
					t.Fatalf("rank %d: %v", i, got)
				}
			}
			var got []string
			for id := uint64(101); id <= 103; id++ {
				got = append(got, h.submit(simReq(id, PriorityDefault, 8))...)
			}
			h.want("limits", got, tt.want...)
		})
	}
}

// SMG's queue_size is per priority class, counted across policy classes
// and models (one admission layer in front of every Dynamo queue).
func TestAudit_QueueSizeCountsAcrossPolicyClassesAndModels(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 2
	})
	cfg.Policy.Root = simProfile(ClassSpec{Name: "a", Quantum: 1}, ClassSpec{Name: "b", Quantum: 1})
	h := newSim(t, cfg, simWorker("w", 1))
	req := func(id uint64, model, class string) Request {
		return Request{ID: id, Model: model, Class: class, Priority: PriorityDefault, ISL: 8}
	}
	h.want("the only slot", h.submit(req(1, "m", "a")), "dispatch 1 w/0")
	h.want("class a of m", h.submit(req(2, "m", "a")), "queue 2")
	h.want("class b of m2", h.submit(req(3, "m2", "b")), "queue 3")
	h.want("full across classes and models", h.submit(req(4, "m3", "b")), "reject 4 queue_full")
	h.want("bulk has its own queue_size", h.submit(Request{ID: 5, Model: "m", Priority: PriorityBulk, ISL: 8}), "queue 5")
}

// System requests are never promoted: no promotion deadline, no promotion
// (SMG reference §10, §11).
func TestAudit_SystemIsNeverPromoted(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PrioritySystem].StarvationThreshold = time.Second
		pc.Classes[PrioritySystem].QueueTimeout = 30 * time.Second
	}), simWorker("w", 1))
	h.want("system 1", h.submit(simReq(1, PrioritySystem, 8)), "dispatch 1 w/0")
	h.want("system 2 queues", h.submit(simReq(2, PrioritySystem, 8)), "queue 2")
	simWantDeadline(t, h.s, 30*time.Second)
	h.at(10*time.Second).want("no promotion", h.tick())
	if e := h.s.entries[2]; e == nil || e.promoted {
		t.Fatal("system request promoted")
	}
}

// Done, Cancel and FirstToken are idempotent: every request reaches one
// outcome and releases its booking once.
func TestAudit_LifecycleIsIdempotent(t *testing.T) {
	h := newSim(t, simSMG(simZeroFloors), simWorker("w", 1))
	h.want("1", h.submit(simReq(1, PriorityBulk, 40)), "dispatch 1 w/0")
	h.want("2 queues", h.submit(simReq(2, PriorityBulk, 40)), "queue 2")
	h.want("first token of a queued request is ignored", h.first(2))
	h.want("first token", h.first(1))
	h.want("a second first token", h.first(1))
	h.want("done: 2 takes the slot", h.release(1), "dispatch 2 w/0 queued")
	h.want("a second done", h.release(1))
	h.want("cancel after done", h.release(1))
	h.want("first token after done", h.first(1))
	h.want("cancel", h.release(2))
	h.want("done after cancel", h.release(2))
	st := h.s.Stats()
	if st.InFlight != [NumPriorities]uint32{} || st.Ranks[0] != (RankStats{Worker: "w"}) || len(h.s.entries) != 0 {
		t.Fatalf("in flight %v rank %+v entries %d", st.InFlight, st.Ranks[0], len(h.s.entries))
	}
	if a := st.Admits[PriorityBulk]; a[OutcomeAdmitted] != 2 || a[OutcomeClientCancelled] != 0 {
		t.Fatalf("admits %v", a)
	}
}

// A queued unpinned request whose model loses every worker is rejected
// with OutcomeNoEndpoints by the dispatch pass that follows SetWorkers,
// even when no slot is free (it needs none).
func TestAudit_SetWorkersRejectsRequestsLeftWithoutWorkers(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Policy.Root = simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})
	h := newSim(t, cfg, Worker{ID: "w", Model: "m", MaxRunningRequests: 1}, Worker{ID: "o", Model: "other", MaxRunningRequests: 1})
	h.want("w busy", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	h.want("queued", h.submit(simReq(2, PriorityDefault, 8)), "queue 2")
	h.want("the other model fills the last slot", h.submit(Request{ID: 3, Model: "other", ISL: 8}), "dispatch 3 o/0")
	h.want("m loses its worker", h.workers(Worker{ID: "o", Model: "other", MaxRunningRequests: 1}), "reject 2 no_endpoints queued")
}

// NextDeadline is exact and never leaves a busy loop: nothing is due
// before it (Tick one nanosecond earlier does nothing), something is due
// at it, and after Tick(now) the next deadline is later than now or absent.
// Seeded random workloads over every class, with timeouts and thresholds
// that collide.
func TestAudit_NextDeadlineIsExactAndNeverStuck(t *testing.T) {
	fired := 0
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 0xdead))
		cfg := simSMG(func(pc *PriorityConfig) {
			simZeroFloors(pc)
			for p := range pc.Classes {
				pc.Classes[p].QueueTimeout = time.Duration(1+rng.IntN(4)) * time.Second
				pc.Classes[p].StarvationThreshold = time.Duration(1+rng.IntN(4)) * time.Second
			}
		})
		h := newSim(t, cfg, simWorker("w", 2))
		var inFlight []uint64
		promoted := func() int {
			n := 0
			for _, e := range h.s.entries {
				if e.promoted {
					n++
				}
			}
			return n
		}
		track := func(acts []Action) []Action {
			for _, a := range acts {
				if a.Kind == ActionDispatch {
					inFlight = append(inFlight, a.ID)
				}
			}
			return acts
		}
		for id := uint64(1); id < 400; id++ {
			switch rng.IntN(5) {
			case 0, 1:
				track(h.s.Submit(h.now, simReq(id, Priority(rng.IntN(NumPriorities)), 8)))
			case 2:
				if len(inFlight) > 0 {
					i := rng.IntN(len(inFlight))
					v := inFlight[i]
					inFlight = append(inFlight[:i], inFlight[i+1:]...)
					track(h.s.Release(h.now, v))
				}
			case 3: // a late timer: time passes, then Tick
				h.now = h.now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				track(h.s.Tick(h.now))
				if d, ok := h.s.NextDeadline(); ok && !d.After(h.now) {
					t.Fatalf("seed %d: after Tick(%v) the next deadline is %v", seed, h.now.Sub(simT0), d.Sub(simT0))
				}
			case 4: // the timer fires exactly
				d, ok := h.s.NextDeadline()
				if !ok {
					continue
				}
				if d.Before(h.now) {
					t.Fatalf("seed %d: deadline %v before now %v without a missed Tick", seed, d.Sub(simT0), h.now.Sub(simT0))
				}
				if early := d.Add(-1); early.After(h.now) || early.Equal(h.now) {
					before := promoted()
					if acts := h.s.Tick(early); len(acts) != 0 || promoted() != before {
						t.Fatalf("seed %d: Tick one nanosecond early did work: %v", seed, simRender(acts))
					}
				}
				h.now = d
				fired++
				before := promoted()
				acts := track(h.s.Tick(d))
				timedOut := false
				for _, a := range acts {
					timedOut = timedOut || a.Outcome == OutcomeQueueTimeout
				}
				if !timedOut && promoted() <= before {
					t.Fatalf("seed %d: nothing was due at the deadline %v", seed, d.Sub(simT0))
				}
				if next, ok := h.s.NextDeadline(); ok && !next.After(d) {
					t.Fatalf("seed %d: after Tick at the deadline %v the next one is %v", seed, d.Sub(simT0), next.Sub(simT0))
				}
			}
		}
	}
	if fired < 300 {
		t.Fatalf("only %d deadlines fired; the workload does not exercise NextDeadline", fired)
	}
}

// An explicit class skips the cache lookup only for choosing the class;
// the queue snapshot (cost, WSPT score, cached-token limit) is still taken
// when the request queues (Dynamo reference §2.6, §5.4, §6.3).
func TestAudit_ExplicitClassStillSnapshotsTheCost(t *testing.T) {
	p := simSampleProfile()
	for i := range p.Classes {
		p.Classes[i].BusyThreshold = simU64(0)
	}
	h := newSim(t, Config{Policy: PolicyConfig{Root: p}}, Worker{ID: "w"})
	h.want("busy", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	h.submit(Request{ID: 2, Model: "m", Class: "custom_priority", ISL: 5000, Cached: []CachedTokens{{"w", 4000}}})
	e := h.s.entries[2]
	if e == nil || e.state != stateQueued || e.spec().Name != "custom_priority" {
		t.Fatal("request 2 not queued in custom_priority")
	}
	if e.cached != 4000 || e.cost != 1000 || e.score != 1.0/1000 {
		t.Fatalf("cached %d cost %d score %v, want 4000, 1000, 1/1000", e.cached, e.cost, e.score)
	}
}

// A nil Selection means Dynamo's defaults; a given one is used as is, so
// "scale 0, credit 0, temperature 0" is the decode-only cost, not the
// defaults.
func TestAudit_SelectionNilMeansDefaults(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "w"})
	if h.s.sel != DefaultSelection() {
		t.Fatalf("nil selection became %+v", h.s.sel)
	}
	h = newSim(t, Config{Selection: &SelectionConfig{}}, Worker{ID: "w"})
	r := h.s.workers[0].ranks[0]
	r.prefill, r.blocks = 1000, 10
	if got := h.s.rankCost(r, 64, 32); got != 10+4 {
		t.Fatalf("scale 0: cost %v, want the decode blocks only", got)
	}
}

// The empty model name's queue hosts overflow names, which resolve to the
// root or fallback profile; a model profile for the empty name would break
// that, and the policy file rejects it upstream too.
func TestAudit_NewRejectsAnEmptyModelProfileName(t *testing.T) {
	_, err := New(Config{Policy: PolicyConfig{Models: map[string]*Profile{"": SyntheticProfile(nil, FCFS)}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "model profile name must not be empty") {
		t.Fatalf("New error = %v", err)
	}
}

// Deviations from the references that the audit left in place (see the
// comments for the upstream behaviour). These tests pin today's behaviour
// so that a deliberate change shows up here.
func TestAudit_KnownDeviations(t *testing.T) {
	t.Run("a fallback capacity above 65535 saturates", func(t *testing.T) {
		// Upstream treats --max-concurrent-requests above 65535 as unset
		// (1024); the shell passes 0 (the default) for such values.
		h := newSim(t, Config{FallbackCapacity: 70000})
		if got := h.s.Stats().Capacity; got != 65535 {
			t.Fatalf("capacity %d", got)
		}
	})
}

// Upstream's decode term adds the request's blocks that are not already
// active on the rank (blocks of requests in flight); a prefix hit from a
// finished request earns prefill credit only. So with 100 active blocks on
// the hit worker a, upstream picks the idle b for a 1024-token prompt
// (a 0 + 164 against b 64 + 64), and so does tollgate.
func TestAudit_PrefixHitCreditedOnceAgainstPrefill(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "b"})
	h.s.byID["a"].ranks[0].blocks = 100
	r := simReq(1, PriorityDefault, 1024)
	r.Cached = []CachedTokens{{"a", 1024}}
	h.want("load outweighs a prefix hit", h.submit(r), "dispatch 1 b/0")
}

// A queued request no worker can serve needs no slot: when it reaches the
// head of its lane it is rejected at once with OutcomeNoEndpoints, even
// while the slot gate is closed, not held until a slot frees or its queue
// timeout answers it with the wrong reason. (Dynamo queues such an arrival
// only behind a backlog of its class and fails it when it reaches the head;
// TestDynamo_NoEndpoints is the same sequence without the slot gate.)
func TestAudit_UnservableRequestIsRejectedWhileTheSlotGateIsClosed(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Policy.Root = simProfile(ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)})
	h := newSim(t, cfg, Worker{ID: "w", Model: "m", MaxRunningRequests: 1})
	h.want("the one slot taken", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
	h.want("a backlog", h.submit(simReq(2, PriorityDefault, 8)), "queue 2")
	tainted := simReq(3, PriorityDefault, 8)
	tainted.RequiredTaints = []string{"y"}
	h.want("no worker carries y: joins the backlog", h.submit(tainted), "queue 3")
	h.want("2 takes the freed slot, 3 reaches the head and fails", h.release(1),
		"dispatch 2 w/0 queued", "reject 3 no_endpoints queued")
	if h.s.queuedTotal != 0 {
		t.Fatalf("%d queued; want none", h.s.queuedTotal)
	}
}
