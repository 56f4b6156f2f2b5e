package sched

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// benchScheduler builds the steady-state scenario of the Submit+dispatch+Release
// benchmarks: a profile of classes explicit classes c0..c{classes-1}, each
// busy above 0 active prefill tokens; a "hot" worker (taint hot) that serves
// the measured requests; and, when lanes > 0, a worker with lanes DP ranks
// whose every rank is busy and has one more pinned request queued behind it,
// spread over the classes. Those exact lanes stay blocked for the whole run.
// With slots, the priority scheduler is on with its defaults at capacity
// 1024.
func benchScheduler(tb testing.TB, classes, lanes int, slots bool) *Scheduler {
	tb.Helper()
	specs := make([]ClassSpec, classes)
	for i := range specs {
		specs[i] = ClassSpec{Name: fmt.Sprintf("c%d", i), Quantum: 512, BusyThreshold: simU64(0)}
	}
	cfg := Config{Policy: PolicyConfig{Root: simProfile(specs...)}, Start: simT0}
	workers := []Worker{{ID: "hot", Taints: []string{"hot"}, MaxRunningRequests: 512}}
	if lanes > 0 {
		workers = append(workers, Worker{ID: "lanes", DPSize: uint32(lanes), MaxRunningRequests: 512})
	}
	if slots {
		cfg.Priority = DefaultPriorityConfig()
	}
	s, err := New(cfg, workers)
	if err != nil {
		tb.Fatal(err)
	}
	id := uint64(1 << 40)
	for rank := range lanes {
		for range 2 { // the first makes the rank busy, the second queues
			id++
			r := Request{ID: id, Model: "m", Class: specs[rank%classes].Name, Priority: PriorityDefault, ISL: 64,
				Pin: &Pin{Worker: "lanes", Rank: uint32(rank), HasRank: true}}
			s.Submit(simT0, r)
		}
	}
	if got := s.queuedTotal; got != lanes {
		tb.Fatalf("%d queued, want %d blocked lanes", got, lanes)
	}
	return s
}

// benchCycle is one measured operation: a request for the hot worker is
// submitted (dispatched at once, or queued behind the blocked lanes of its
// class and dispatched by the same call's pass) and then completes.
func benchCycle(tb testing.TB, s *Scheduler, r *Request, i uint64) {
	r.ID = i
	r.Class = s.cfg.Policy.Root.Classes[int(i)%len(s.cfg.Policy.Root.Classes)].Name
	if acts := s.Submit(simT0, *r); len(acts) != 1 || acts[0].Kind != ActionDispatch {
		tb.Fatalf("submit %d: %v", i, simRender(acts))
	}
	if acts := s.Release(simT0, i); len(acts) != 0 {
		tb.Fatalf("done %d: %v", i, simRender(acts))
	}
}

func BenchmarkScheduler_SubmitDispatchDone(b *testing.B) {
	for _, slots := range []bool{false, true} {
		for _, classes := range []int{1, 8, 64} {
			for _, lanes := range []int{0, 100, 10000} {
				// At capacity 1024 there are not enough slots to keep 10000
				// lanes busy.
				if slots && (classes != 8 || lanes > 100) {
					continue
				}
				name := fmt.Sprintf("slots=%v/classes=%d/lanes=%d", slots, classes, lanes)
				b.Run(name, func(b *testing.B) {
					s := benchScheduler(b, classes, lanes, slots)
					r := Request{Model: "m", Priority: PriorityDefault, ISL: 512, RequiredTaints: []string{"hot"},
						Cached: []CachedTokens{{"hot", 128}}}
					i := uint64(0)
					b.ReportAllocs()
					for b.Loop() {
						i++
						benchCycle(b, s, &r, i)
					}
				})
			}
		}
	}
}

// TestScheduler_SteadyStateAllocations is the zero-allocation regression
// test of the hot path (Submit, dispatch, Done) at 8 classes.
func TestScheduler_SteadyStateAllocations(t *testing.T) {
	if simRaceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tt := range []struct {
		lanes int
		slots bool
	}{{0, false}, {100, false}, {100, true}} {
		s := benchScheduler(t, 8, tt.lanes, tt.slots)
		r := Request{Model: "m", Priority: PriorityDefault, ISL: 512, RequiredTaints: []string{"hot"}, Cached: []CachedTokens{{"hot", 128}}}
		i := uint64(0)
		for range 1000 { // warm the pool, the maps and the scratch space
			i++
			benchCycle(t, s, &r, i)
		}
		if n := testing.AllocsPerRun(1000, func() { i++; benchCycle(t, s, &r, i) }); n != 0 {
			t.Errorf("lanes %d slots %v: %v allocations per Submit+Done, want 0", tt.lanes, tt.slots, n)
		}
	}
}

// BenchmarkScheduler_Preemption measures a preemption cycle at capacity
// 1024 with 1000 bulk and default requests in flight and no free slot for
// interactive: an interactive arrival finds its victim (the victim search),
// the victim ends and hands its slot over, the preemptor completes, and a
// new bulk request refills the pool.
func BenchmarkScheduler_Preemption(b *testing.B) {
	cfg := Config{Priority: DefaultPriorityConfig(), Start: simT0}
	for p := range cfg.Priority.Classes {
		cfg.Priority.Classes[p].ReservedFloor, cfg.Priority.Classes[p].ReservedPerSlot = 0, 0
	}
	s, err := New(cfg, []Worker{{ID: "w", MaxRunningRequests: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	id := uint64(0)
	for range 1024 {
		id++
		s.Submit(simT0, Request{ID: id, Model: "m", Priority: Priority(id % 2), ISL: 256})
	}
	b.ReportAllocs()
	for b.Loop() {
		id++
		preemptor := id
		acts := s.Submit(simT0, Request{ID: preemptor, Model: "m", Priority: PriorityInteractive, ISL: 256})
		if len(acts) != 2 || acts[0].Kind != ActionPreempt || acts[1].Kind != ActionQueue || acts[1].ID != preemptor {
			b.Fatalf("preemption: %v", simRender(acts))
		}
		victim := acts[0].ID
		if acts := s.Release(simT0, victim); len(acts) != 1 || acts[0].ID != preemptor {
			b.Fatalf("hand-off: %v", simRender(acts))
		}
		s.Release(simT0, preemptor)
		id++
		s.Submit(simT0, Request{ID: id, Model: "m", Priority: Priority(id % 2), ISL: 256})
	}
}

// BenchmarkScheduler_QueuedMemory reports the heap bytes held per queued
// request with 1,000,000 requests queued (one model, one class, unpinned,
// no cache hits): the entry, its place in the lane heap, the ID map and
// the wait list. It is a benchmark so that the normal test run skips it.
func BenchmarkScheduler_QueuedMemory(b *testing.B) {
	const n = 1_000_000
	var perRequest float64
	for b.Loop() {
		before := heapInUse()
		s := benchScheduler(b, 1, 0, false)
		s.Submit(simT0, Request{ID: 1, Model: "m", ISL: 1, RequiredTaints: []string{"hot"}}) // makes "hot" busy
		for id := uint64(2); id <= n+1; id++ {
			s.Submit(simT0.Add(time.Duration(id)), Request{ID: id, Model: "m", ISL: 512})
		}
		if s.queuedTotal != n {
			b.Fatalf("%d queued", s.queuedTotal)
		}
		perRequest = float64(heapInUse()-before) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perRequest, "B/queued")
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
