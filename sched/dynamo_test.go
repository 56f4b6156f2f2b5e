package sched

import (
	"math"
	"math/rand/v2"
	"testing"
)

// simSampleProfile is the upstream sample policy's root profile: buckets
// cached (0) and uncached (3072), families standard and latency, and the
// explicit class custom_priority.
func simSampleProfile() *Profile {
	return &Profile{
		Classes: []ClassSpec{
			{Name: "cached", Family: "standard", Bucket: "cached", QueuePolicy: WSPT, Quantum: 2048},
			{Name: "uncached", Family: "standard", Bucket: "uncached", Quantum: 512},
			{Name: "latency_cached", Family: "latency", Bucket: "cached", QueuePolicy: WSPT, Quantum: 4096},
			{Name: "latency_uncached", Family: "latency", Bucket: "uncached", QueuePolicy: WSPT, Quantum: 1024},
			{Name: "custom_priority", QueuePolicy: WSPT, Quantum: 4096},
		},
		Buckets:       []Bucket{{0, "cached"}, {3072, "uncached"}},
		DefaultFamily: "standard",
		Matrix:        map[string][]int{"standard": {0, 1}, "latency": {2, 3}},
		Explicit:      map[string]int{"custom_priority": 4},
	}
}

func TestDynamo_ResolutionAndSnapshot(t *testing.T) {
	workers := []Worker{
		{ID: "w0", Taints: []string{"a"}},
		{ID: "w1"},
		{ID: "wx", Model: "other"},
	}
	hits := []CachedTokens{{"w0", 4000}, {"w1", 1000}, {"wx", 4900}}
	tests := []struct {
		name   string
		class  string
		isl    uint64
		cached []CachedTokens
		pin    *Pin
		taints []string
		want   string // policy class
		cache  uint64 // cached snapshot
	}{
		{"no header, below the floor", "", 3071, nil, nil, nil, "cached", 0},
		{"no header, at the floor", "", 3072, nil, nil, nil, "uncached", 0},
		{"family, no uncached tokens", "latency", 0, nil, nil, nil, "latency_cached", 0},
		{"family, large", "latency", 10000, nil, nil, nil, "latency_uncached", 0},
		{"unknown family", "unknown", 100, nil, nil, nil, "cached", 0},
		{"a physical class name does not bypass the matrix", "cached", 5000, nil, nil, nil, "uncached", 0},
		{"explicit class skips the matrix", "custom_priority", 100000, nil, nil, nil, "custom_priority", 0},
		{"best hit over eligible workers", "", 5000, hits, nil, nil, "cached", 4000},
		{"taints narrow the eligible workers", "", 5000, hits, nil, []string{"a"}, "cached", 4000},
		{"a worker of another model does not count", "", 5000, hits[1:], nil, nil, "uncached", 1000},
		{"pinned worker's own hit", "", 5000, hits, &Pin{Worker: "w1"}, nil, "uncached", 1000},
		{"cached capped at ISL", "", 4000, []CachedTokens{{"w1", 5000}}, nil, nil, "cached", 4000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSim(t, Config{Policy: PolicyConfig{Root: simSampleProfile()}}, workers...)
			r := Request{ID: 1, Model: "m", Class: tt.class, ISL: tt.isl, Cached: tt.cached, Pin: tt.pin, RequiredTaints: tt.taints}
			acts := h.s.Submit(h.now, r)
			if len(acts) != 1 || acts[0].Kind != ActionDispatch {
				t.Fatalf("actions = %v", simRender(acts))
			}
			a := acts[0]
			if a.PolicyClass != tt.want || a.ISL != tt.isl || a.Cached != tt.cache || a.Uncached != tt.isl-tt.cache {
				t.Fatalf("class %q isl %d cached %d uncached %d; want %q cached %d", a.PolicyClass, a.ISL, a.Cached, a.Uncached, tt.want, tt.cache)
			}
		})
	}
}

func TestDynamo_QueueKeySnapshot(t *testing.T) {
	// Only the snapshot and key are checked here; ordering is the ring's.
	p := simProfile(ClassSpec{Name: "f", Quantum: 1, BusyThreshold: simU64(0)}, ClassSpec{Name: "w", QueuePolicy: WSPT, Quantum: 1, BusyThreshold: simU64(0)})
	h := newSim(t, Config{Policy: PolicyConfig{Root: p}}, simWorker("w0", 8))
	h.submit(Request{ID: 1, Model: "m", ISL: 1}) // makes w0 busy for both classes
	h.at(3_500_000_000)                          // 3.5 s
	h.submit(Request{ID: 2, Model: "m", Class: "f", ISL: 10, PriorityJump: 2, Priority: PriorityInteractive})
	h.submit(Request{ID: 3, Model: "m", Class: "w", ISL: 1000, Cached: []CachedTokens{{"w0", 200}}, PriorityJump: -5})
	h.submit(Request{ID: 4, Model: "m", Class: "w", ISL: 0, StrictPriority: 9, HasStrictPriority: true})
	tests := []struct {
		id     uint64
		strict uint64
		score  float64
		cost   uint64
		seq    uint64
	}{
		{2, 2 << 32, 2 - 3.5, 10, 0}, // interactive, no hint
		{3, 0, 1.0 / 800, 800, 1},
		{4, 9, 1, 1, 2},
	}
	for _, tt := range tests {
		e := h.s.entries[tt.id]
		if e == nil || e.state != stateQueued {
			t.Fatalf("request %d not queued", tt.id)
		}
		if e.strict != tt.strict || math.Abs(e.score-tt.score) > 1e-12 || e.cost != tt.cost || e.seq != tt.seq {
			t.Errorf("request %d: strict %d score %v cost %d seq %d; want %+v", tt.id, e.strict, e.score, e.cost, e.seq, tt)
		}
	}
}

func TestDynamo_BusyGate(t *testing.T) {
	tests := []struct {
		name       string
		threshold  *uint64
		frac       *float64
		maxBatched uint64
		isl        uint64
		dispatched int // arrivals dispatched before the first one queues
	}{
		{"absolute: strict greater", simU64(1536), nil, 0, 512, 4},
		{"fraction of max batched", nil, simF64(0.5), 1000, 300, 2},
		{"fraction with the default max batched never busy", nil, simF64(0.5), 0, 1 << 19, 6},
		{"OR: the fraction trips first", simU64(10000), simF64(0.5), 1000, 300, 2},
		{"OR: the absolute line trips first", simU64(500), simF64(100), 1000, 300, 2},
		{"threshold 0: busy with any load", simU64(0), nil, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: tt.threshold, BusyThresholdFrac: tt.frac}
			h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, Worker{ID: "w", MaxBatchedTokens: tt.maxBatched})
			for i := range 6 {
				got := h.submit(simReq(uint64(i+1), PriorityDefault, tt.isl))
				switch {
				case i < tt.dispatched && len(got) != 1:
					t.Fatalf("arrival %d: %v, want a dispatch", i+1, got)
				case i >= tt.dispatched && (len(got) != 1 || got[0] != "queue "+simItoa(uint64(i+1))):
					t.Fatalf("arrival %d: %v, want it queued", i+1, got)
				}
			}
			if tt.dispatched < 6 {
				h.want("first token frees the worker", h.first(1), "dispatch "+simItoa(uint64(tt.dispatched+1))+" w/0 queued")
			}
		})
	}
}

func TestDynamo_BusyGateOverRanks(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(500)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, Worker{ID: "w", DPSize: 2})
	h.want("rank tie broken at random", h.submit(simReq(1, PriorityDefault, 600)), "dispatch 1 w/1")
	h.want("one idle rank keeps the pool open", h.submit(simReq(2, PriorityDefault, 600)), "dispatch 2 w/0")
	h.want("every rank busy", h.submit(simReq(3, PriorityDefault, 600)), "queue 3")

	ratio := c
	ratio.BusyWorkerRatio = 0.5
	h = newSim(t, Config{Policy: PolicyConfig{Root: simProfile(ratio)}}, Worker{ID: "w", DPSize: 4})
	h.submit(simReq(1, PriorityDefault, 600))
	if got := h.submit(simReq(2, PriorityDefault, 600)); len(got) != 1 {
		t.Fatalf("1 of 4 ranks busy: %v", got)
	}
	h.want("2 of 4 ranks busy reaches ratio 0.5", h.submit(simReq(3, PriorityDefault, 600)), "queue 3")
}

func TestDynamo_NewArrivalsDoNotBypassBacklog(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(100)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}},
		Worker{ID: "w0", Taints: []string{"a"}}, Worker{ID: "w1"})
	tainted := func(id uint64) Request {
		r := simReq(id, PriorityDefault, 200)
		r.RequiredTaints = []string{"a"}
		return r
	}
	h.want("w0 takes the first tainted request", h.submit(tainted(1)), "dispatch 1 w0/0")
	h.want("w0 busy: the next one queues", h.submit(tainted(2)), "queue 2")
	h.want("idle w1, but the class has a backlog", h.submit(simReq(3, PriorityDefault, 200)), "queue 3")
	// The pinned arrival joins the backlog in its own lane, which is
	// dispatchable, and the enqueue's dispatch pass sends it at once.
	pinned := simReq(4, PriorityDefault, 200)
	pinned.Pin = &Pin{Worker: "w1"}
	h.want("exact lane dispatches on enqueue", h.submit(pinned), "dispatch 4 w1/0 queued")
	h.want("w1 idle again, but the shared lane's head waits for w0", h.first(4))
	h.want("w0 frees: the shared lane drains in order", h.first(1), "dispatch 2 w0/0 queued", "dispatch 3 w1/0 queued")
}

func TestDynamo_QueueLimits(t *testing.T) {
	busy := func(c ClassSpec) ClassSpec { c.Name, c.Quantum, c.BusyThreshold = "c", 1, simU64(0); return c }
	tests := []struct {
		name    string
		class   ClassSpec
		workers int
		queued  []Request // after request 1 makes the worker busy
		want    []string
	}{
		{
			name:  "requests: current >= limit",
			class: busy(ClassSpec{RequestLimitPerWorker: simU64(2)}), workers: 1,
			queued: []Request{simReq(2, 1, 8), simReq(3, 1, 8), simReq(4, 1, 8)},
			want:   []string{"queue 2", "queue 3", "reject 4 class_limit requests 2>=2"},
		},
		{
			name:  "limit scales with worker instances",
			class: busy(ClassSpec{RequestLimitPerWorker: simU64(1)}), workers: 2,
			queued: []Request{simReq(2, 1, 8), simReq(3, 1, 8), simReq(4, 1, 8)},
			want:   []string{"queue 2", "queue 3", "reject 4 class_limit requests 2>=2"},
		},
		{
			name:  "raw ISL: the request crossing the limit is accepted",
			class: busy(ClassSpec{RawISLLimitPerWorker: simU64(1000)}), workers: 1,
			queued: []Request{simReq(2, 1, 600), simReq(3, 1, 600), simReq(4, 1, 1)},
			want:   []string{"queue 2", "queue 3", "reject 4 class_limit raw_isl_tokens 1200>=1000"},
		},
		{
			name:  "cached tokens",
			class: busy(ClassSpec{CachedTokenLimitPerWorker: simU64(50)}), workers: 1,
			queued: []Request{
				{ID: 2, Model: "m", ISL: 100, Cached: []CachedTokens{{"w0", 60}}},
				{ID: 3, Model: "m", ISL: 100},
			},
			want: []string{"queue 2", "reject 3 class_limit cached_tokens 60>=50"},
		},
		{
			name:  "limit 0 rejects everything that has to queue",
			class: busy(ClassSpec{RequestLimitPerWorker: simU64(0)}), workers: 1,
			queued: []Request{simReq(2, 1, 8)},
			want:   []string{"reject 2 class_limit requests 0>=0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ws []Worker
			for i := range tt.workers {
				ws = append(ws, Worker{ID: "w" + simItoa(uint64(i))})
			}
			ws = append(ws, Worker{ID: "other", Model: "other"}) // not counted
			h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(tt.class)}}, ws...)
			for i := range tt.workers {
				if got := h.submit(simReq(uint64(100+i), PriorityDefault, 1)); len(got) != 1 {
					t.Fatalf("the first request per worker dispatches at once: %v", got)
				}
			}
			var got []string
			for _, r := range tt.queued {
				got = append(got, h.submit(r)...)
			}
			h.want("limits", got, tt.want...)
			bp := h.s.Stats().Queues[0].Backpressure
			if kind := limitKindOf(t, h.s.Submit(h.now, simReq(99, PriorityDefault, 1))); bp[kind] != 1 {
				t.Fatalf("backpressure %v", bp)
			}
		})
	}
}

// limitKindOf returns the limit kind of a single class-limit rejection.
func limitKindOf(t *testing.T, acts []Action) LimitKind {
	t.Helper()
	if len(acts) != 1 || acts[0].Outcome != OutcomeClassLimit {
		t.Fatalf("want one class-limit rejection, got %v", simRender(acts))
	}
	return acts[0].LimitKind
}

func TestDynamo_LimitOrderWithQueueSize(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0), RequestLimitPerWorker: simU64(1)}
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityDefault].QueueSize = 1
	})
	cfg.Policy.Root = simProfile(c)
	h := newSim(t, cfg, simWorker("w", 8))
	h.want("dispatch", h.submit(simReq(1, PriorityDefault, 1)), "dispatch 1 w/0")
	h.want("queued", h.submit(simReq(2, PriorityDefault, 1)), "queue 2")
	h.want("both reached: queue_size answers first", h.submit(simReq(3, PriorityDefault, 1)), "reject 3 queue_full")
	h.want("only the class limit reached", h.submit(simReq(4, PriorityBulk, 1)), "reject 4 class_limit requests 1>=1")
	st := h.s.Stats()
	if st.Queues[0].Backpressure[LimitRequests] != 1 || st.Admits[PriorityDefault][OutcomeQueueFull] != 1 {
		t.Fatalf("backpressure %v admits %v", st.Queues[0].Backpressure, st.Admits)
	}
}

func TestDynamo_PinnedWorkers(t *testing.T) {
	workers := []Worker{
		{ID: "w1"},
		{ID: "w4", DPSize: 4, DPStart: 2, Taints: []string{"gpu"}},
		{ID: "wx", Model: "other"},
	}
	tests := []struct {
		name   string
		pin    Pin
		taints []string
		want   string // dispatch target, or the rejection message
	}{
		{"single rank, no rank given", Pin{Worker: "w1"}, nil, "w1/0"},
		{"explicit rank 0", Pin{Worker: "w1", HasRank: true}, nil, "w1/0"},
		{"rank inside the range", Pin{Worker: "w4", Rank: 3, HasRank: true}, []string{"gpu"}, "w4/3"},
		{"several ranks, no rank given", Pin{Worker: "w4"}, nil,
			"Pinned worker w4 requires an explicit dp_rank because it has multiple or unknown DP ranks"},
		// Upstream answers with the dp_rank text here, which misleads: the
		// worker does not exist.
		{"unknown worker, no rank given", Pin{Worker: "nope"}, nil,
			"Pinned worker nope is not eligible: no ready worker with that id serves the model"},
		{"unknown worker", Pin{Worker: "nope", HasRank: true}, nil,
			"Pinned worker nope dp_rank 0 is not eligible: worker nope is unavailable"},
		{"worker of another model", Pin{Worker: "wx", HasRank: true}, nil,
			"Pinned worker wx dp_rank 0 is not eligible: worker wx is unavailable"},
		{"rank above the range", Pin{Worker: "w4", Rank: 6, HasRank: true}, nil,
			"Pinned worker w4 dp_rank 6 is not eligible: worker w4 dp_rank 6 is outside [2, 6)"},
		{"rank below the range", Pin{Worker: "w4", Rank: 1, HasRank: true}, nil,
			"Pinned worker w4 dp_rank 1 is not eligible: worker w4 dp_rank 1 is outside [2, 6)"},
		{"taints", Pin{Worker: "w1", HasRank: true}, []string{"gpu"},
			"Pinned worker w1 dp_rank 0 is not eligible: worker w1 does not satisfy routing constraints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSim(t, Config{}, workers...)
			pin := tt.pin
			r := simReq(1, PriorityDefault, 10)
			r.Pin, r.RequiredTaints = &pin, tt.taints
			acts := h.s.Submit(h.now, r)
			if len(acts) != 1 {
				t.Fatalf("actions %v", simRender(acts))
			}
			switch a := acts[0]; a.Kind {
			case ActionDispatch:
				if got := a.Worker + "/" + simItoa(uint64(a.Rank)); got != tt.want {
					t.Fatalf("dispatched to %s, want %s", got, tt.want)
				}
			case ActionReject, ActionPreempt, ActionQueue:
				if a.Outcome != OutcomePinInvalid || a.Message != tt.want || a.Queued {
					t.Fatalf("%s %q, want pin_invalid %q", simRender(acts)[0], a.Message, tt.want)
				}
			}
		})
	}
}

func TestDynamo_PinnedToRemovedWorker(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, Worker{ID: "a"}, Worker{ID: "b"})
	pinned := func(id uint64, w string) Request {
		r := simReq(id, PriorityDefault, 10)
		r.Pin = &Pin{Worker: w}
		return r
	}
	h.want("a busy", h.submit(pinned(1, "a")), "dispatch 1 a/0")
	h.want("b busy", h.submit(pinned(2, "b")), "dispatch 2 b/0")
	h.want("queued on a", h.submit(pinned(3, "a")), "queue 3")
	h.want("queued on b", h.submit(pinned(4, "b")), "queue 4")
	acts := h.s.SetWorkers(h.now, []Worker{{ID: "b"}})
	h.want("pins to a fail", simRender(acts), "reject 3 pin_invalid queued")
	if want := "Pinned worker a dp_rank 0 is not eligible: worker a is unavailable"; acts[0].Message != want {
		t.Fatalf("message %q", acts[0].Message)
	}
	st := h.s.Stats()
	if len(st.Ranks) != 2 || st.Ranks[1].Worker != "a" || !st.Ranks[1].Removed || st.Ranks[1].ActiveRequests != 1 {
		t.Fatalf("ranks %+v", st.Ranks)
	}
	h.want("the removed worker's request ends", h.finish(1))
	if st := h.s.Stats(); len(st.Ranks) != 1 {
		t.Fatalf("removed rank still listed: %+v", st.Ranks)
	}
	h.want("b frees", h.first(2), "dispatch 4 b/0 queued")
}

func TestDynamo_NoEndpoints(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)}
	h := newSim(t, Config{Policy: PolicyConfig{Root: simProfile(c)}}, Worker{ID: "w", Model: "m", Taints: []string{"x"}})
	ghost := Request{ID: 1, Model: "ghost", ISL: 5}
	acts := h.s.Submit(h.now, ghost)
	h.want("unserved model", simRender(acts), "reject 1 no_endpoints")
	if want := `no endpoints available to route work: no ready worker serves the model`; acts[0].Message != want {
		t.Fatalf("message %q", acts[0].Message)
	}
	h.want("busy the worker", h.submit(simReq(2, PriorityDefault, 5)), "dispatch 2 w/0")
	tainted := simReq(3, PriorityDefault, 5)
	tainted.RequiredTaints = []string{"y"}
	acts = h.s.Submit(h.now, tainted)
	h.want("never queued without a backlog", simRender(acts), "reject 3 no_endpoints")
	if want := `no endpoints available to route work: no ready worker serving the model carries the required taints ["y"]`; acts[0].Message != want {
		t.Fatalf("message %q", acts[0].Message)
	}
	h.want("a backlog", h.submit(simReq(4, PriorityDefault, 5)), "queue 4")
	tainted.ID = 5
	h.want("joins the backlog", h.submit(tainted), "queue 5")
	h.want("reaches the head and fails", h.first(2), "dispatch 4 w/0 queued", "reject 5 no_endpoints queued")
	if st := h.s.Stats(); len(st.Queues) != 1 || st.Queues[0].Model != "m" {
		t.Fatalf("an unserved model must not create a queue: %+v", st.Queues)
	}
}

func TestSelect_Cost(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "w"})
	r := h.s.workers[0].ranks[0]
	r.prefill, r.blocks = 100, 10
	if got := h.s.rankCost(r, 64, 32); got != 22.25 { // (100+64-32)/16 + (10+4)
		t.Fatalf("cost = %v", got)
	}
	h.s.sel = SelectionConfig{PrefillLoadScale: 2, OverlapCredit: 0.5}
	if got := h.s.rankCost(r, 64, 32); got != 32.5 { // 2×(164-16)/16 + 14
		t.Fatalf("scaled cost = %v", got)
	}
	h.s.sel = SelectionConfig{PrefillLoadScale: 1, OverlapCredit: 10}
	if got := h.s.rankCost(r, 64, 32); got != 14 { // prefill term clamps at 0
		t.Fatalf("clamped cost = %v", got)
	}
}

func TestSelect_LowestCostWins(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "b"}, Worker{ID: "c"})
	h.s.byID["b"].ranks[0].blocks = 1
	h.s.byID["c"].ranks[0].blocks = 3
	// ISL 1000 = 62.5 prefill blocks and 63 KV blocks.
	h.want("a: 125.5 < b 126.5 < c 128.5", h.submit(simReq(1, PriorityDefault, 1000)), "dispatch 1 a/0")
	h.want("a 251 > b 126.5 < c 128.5", h.submit(simReq(2, PriorityDefault, 1000)), "dispatch 2 b/0")
	hit := simReq(3, PriorityDefault, 1000)
	hit.Cached = []CachedTokens{{"a", 1000}}
	// A hit is credited against prefill only, as upstream: a's in-flight
	// request still counts, so the idle c wins.
	h.want("a full hit on a: a 62.5+126 loses to c 128.5", h.submit(hit), "dispatch 3 c/0")
	if w, rank, ok := h.s.Route("m"); !ok || w != "a" || rank != 0 {
		t.Fatalf("Route = %s %d %v, want the least-loaded a (62.5+63)", w, rank, ok)
	}
	if st := h.s.Stats(); st.Ranks[0].ActiveRequests != 1 {
		t.Fatal("Route must not book")
	}

	fresh := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "c"})
	fresh.s.byID["c"].ranks[0].blocks = 3
	onC := simReq(1, PriorityDefault, 1000)
	onC.Cached = []CachedTokens{{"c", 1000}}
	fresh.want("a full hit on the near-idle c: 0+66 beats a 62.5+63", fresh.submit(onC), "dispatch 1 c/0")
	if _, _, ok := h.s.Route("ghost"); !ok {
		t.Fatal("workers without a model serve every model")
	}
	h2 := newSim(t, Config{}, Worker{ID: "a", Model: "m"})
	if _, _, ok := h2.s.Route("ghost"); ok {
		t.Fatal("Route found a worker for an unserved model")
	}
}

func TestSelect_SeededTieBreaks(t *testing.T) {
	counts := func(seed uint64) map[string]int {
		cfg := Config{Rand: rand.New(rand.NewPCG(seed, seed))}
		h := newSim(t, cfg, Worker{ID: "a"}, Worker{ID: "b"}, Worker{ID: "c"})
		n := map[string]int{}
		for range 3000 {
			w, _, _ := h.s.Route("m")
			n[w]++
		}
		return n
	}
	n := counts(7)
	for _, w := range []string{"a", "b", "c"} {
		if n[w] < 900 || n[w] > 1100 {
			t.Fatalf("ties not uniform: %v", n)
		}
	}
	if m := counts(7); m["a"] != n["a"] || m["b"] != n["b"] {
		t.Fatalf("same seed, different picks: %v %v", n, m)
	}
}

func TestSelect_Softmax(t *testing.T) {
	h := newSim(t, Config{Selection: &SelectionConfig{PrefillLoadScale: 1, OverlapCredit: 1, Temperature: 1}},
		Worker{ID: "a"}, Worker{ID: "b"}, Worker{ID: "c"})
	// Costs 0, 5, 10 for an empty prompt: normalized 0, 0.5, 1.
	h.s.byID["b"].ranks[0].blocks = 5
	h.s.byID["c"].ranks[0].blocks = 10
	const n = 20000
	got := map[string]float64{}
	for range n {
		got[h.s.pick(need{model: "m"}, nil, 1).key.worker]++
	}
	z := 1 + math.Exp(-0.5) + math.Exp(-1)
	want := map[string]float64{"a": 1 / z, "b": math.Exp(-0.5) / z, "c": math.Exp(-1) / z}
	for w, p := range want {
		if math.Abs(got[w]/n-p) > 0.015 {
			t.Errorf("P(%s) = %.3f, want %.3f", w, got[w]/n, p)
		}
	}
	// Equal costs sample uniformly.
	h.s.byID["b"].ranks[0].blocks, h.s.byID["c"].ranks[0].blocks = 0, 0
	clear(got)
	for range n {
		got[h.s.pick(need{model: "m"}, nil, 1).key.worker]++
	}
	for _, w := range []string{"a", "b", "c"} {
		if math.Abs(got[w]/n-1.0/3) > 0.015 {
			t.Errorf("uniform P(%s) = %.3f", w, got[w]/n)
		}
	}
	// A pin is used without sampling.
	r := simReq(1, PriorityDefault, 10)
	r.Pin = &Pin{Worker: "c"}
	h.want("pinned", h.submit(r), "dispatch 1 c/0")
}
