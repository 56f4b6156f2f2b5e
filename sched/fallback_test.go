package sched

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fallbacksOf(t *testing.T, acts []Action) []RankRef {
	t.Helper()
	if len(acts) != 1 || acts[0].Kind != ActionDispatch {
		t.Fatalf("actions %v, want one dispatch", simRender(acts))
	}
	return acts[0].Fallbacks
}

// Fallbacks are the next-best workers by the selection cost, best first,
// each at its cheapest rank, never the chosen worker, restricted like the
// choice itself (the endpoint picker protocol's "first preferred" list:
// docs/proposals/004-endpoint-picker-protocol/README.md:48-66 at 1748e829).
func TestFallbacks_NextBestByCost(t *testing.T) {
	h := newSim(t, Config{Fallbacks: 2}, Worker{ID: "a"}, Worker{ID: "b", DPSize: 2}, Worker{ID: "c"}, Worker{ID: "d", Model: "other"})
	h.s.byID["a"].ranks[0].blocks = 30
	h.s.byID["b"].ranks[0].blocks = 20
	h.s.byID["b"].ranks[1].blocks = 10
	h.s.byID["c"].ranks[0].blocks = 5
	acts := h.s.Submit(h.now, simReq(1, PriorityDefault, 1000))
	if got, want := simRender(acts), []string{"dispatch 1 c/0"}; !cmp.Equal(got, want) {
		t.Fatalf("dispatch %v, want %v", got, want)
	}
	if diff := cmp.Diff([]RankRef{{"b", 1}, {"a", 0}}, fallbacksOf(t, acts)); diff != "" {
		t.Fatalf("fallbacks (-want +got):\n%s", diff)
	}
	// A subset restricts the fallbacks as it restricts the choice.
	r := simReq(2, PriorityDefault, 1000)
	r.AllowedWorkers = []string{"a", "c"}
	acts = h.s.Submit(h.now, r)
	// c holds request 1 now: a (155.5) is chosen, c (256) is next.
	if got := simRender(acts); !cmp.Equal(got, []string{"dispatch 2 a/0"}) {
		t.Fatalf("subset dispatch %v", got)
	}
	if diff := cmp.Diff([]RankRef{{"c", 0}}, fallbacksOf(t, acts)); diff != "" {
		t.Fatalf("subset fallbacks (-want +got):\n%s", diff)
	}
	// A pin names its worker alone.
	r = simReq(3, PriorityDefault, 1000)
	r.Pin = &Pin{Worker: "a"}
	if fb := fallbacksOf(t, h.s.Submit(h.now, r)); fb != nil {
		t.Fatalf("pinned request got fallbacks %v", fb)
	}
	// A cache hit lowers a fallback's cost as it would the choice's.
	r = simReq(4, PriorityDefault, 1000)
	r.Cached = []CachedTokens{{"a", 1000}}
	acts = h.s.Submit(h.now, r)
	if fb := fallbacksOf(t, acts); len(fb) != 2 || fb[0].Worker == acts[0].Worker {
		t.Fatalf("fallbacks %v for a dispatch to %s", fb, acts[0].Worker)
	}
}

func TestFallbacks_OffByDefaultAndBounded(t *testing.T) {
	h := newSim(t, Config{}, Worker{ID: "a"}, Worker{ID: "b"})
	if fb := fallbacksOf(t, h.s.Submit(h.now, simReq(1, PriorityDefault, 10))); fb != nil {
		t.Fatalf("fallbacks %v without Config.Fallbacks", fb)
	}
	if _, err := New(Config{Fallbacks: MaxFallbacks + 1}, nil); err == nil {
		t.Fatal("Fallbacks above MaxFallbacks accepted")
	}
	one := newSim(t, Config{Fallbacks: 3}, Worker{ID: "a"})
	if fb := fallbacksOf(t, one.s.Submit(one.now, simReq(1, PriorityDefault, 10))); fb != nil {
		t.Fatalf("a single worker has fallbacks %v", fb)
	}
}

// Two dispatches in one call keep their own fallbacks: the second does
// not overwrite the first's.
func TestFallbacks_SeveralDispatchesInOneCall(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Fallbacks = 1
	h := newSim(t, cfg, simWorker("a", 1), simWorker("b", 1))
	h.submit(simReq(1, PriorityDefault, 10))
	h.submit(simReq(2, PriorityDefault, 10))
	h.want("slots full", h.submit(simReq(3, PriorityDefault, 10)), "queue 3")
	h.want("slots full", h.submit(simReq(4, PriorityDefault, 10)), "queue 4")
	acts := h.s.SetWorkers(h.now, []Worker{simWorker("a", 1), simWorker("b", 1), simWorker("c", 1), simWorker("d", 1)})
	if len(acts) != 2 {
		t.Fatalf("actions %v, want two dispatches", simRender(acts))
	}
	first, second := acts[0], acts[1]
	idle := map[string]bool{"c": true, "d": true}
	if !idle[first.Worker] || !idle[second.Worker] || first.Worker == second.Worker {
		t.Fatalf("dispatches %v, want c and d", simRender(acts))
	}
	// 3's next best is the other idle worker; 4's, once both are busy, is
	// the first of the equally loaded workers in the set's order.
	if diff := cmp.Diff([]RankRef{{second.Worker, 0}}, first.Fallbacks); diff != "" {
		t.Fatalf("first dispatch's fallbacks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]RankRef{{"a", 0}}, second.Fallbacks); diff != "" {
		t.Fatalf("second dispatch's fallbacks (-want +got):\n%s", diff)
	}
}

// Served moves the booking to the worker that served the request.
func TestServed_MovesTheBooking(t *testing.T) {
	h := newSim(t, Config{Fallbacks: 1}, Worker{ID: "a"}, Worker{ID: "b", DPSize: 2})
	h.s.byID["b"].ranks[0].blocks, h.s.byID["b"].ranks[1].blocks = 100, 100
	h.want("to a", simRender(h.s.Submit(h.now, Request{ID: 9, Model: "m", ISL: 16})), "dispatch 9 a/0")
	h.s.byID["b"].ranks[0].blocks, h.s.byID["b"].ranks[1].blocks = 0, 1
	r := simReq(1, PriorityDefault, 1000)
	r.Cached = []CachedTokens{{"b", 600}}
	// b/0: 400/16 + 63 = 88 beats a: 1016/16 + 64 = 127.5.
	acts := h.s.Submit(h.now, r)
	h.want("to b", simRender(acts), "dispatch 1 b/0")
	if diff := cmp.Diff([]RankRef{{"a", 0}}, acts[0].Fallbacks); diff != "" {
		t.Fatalf("fallbacks (-want +got):\n%s", diff)
	}
	h.s.Served(h.now, 1, "a", 0)
	a, b := h.rank("a", 0), h.rank("b", 0)
	if a.ActiveRequests != 2 || a.ActivePrefillTokens != 1016 || a.ActiveBlocks != 1+63 || b.ActiveRequests != 0 || b.ActivePrefillTokens != 0 || b.ActiveBlocks != 0 {
		t.Fatalf("after Served: a %+v, b %+v", a, b)
	}
	h.first(1)
	h.s.Served(h.now, 1, "b", 1) // after the first token: no prefill moves
	a, b1 := h.rank("a", 0), h.rank("b", 1)
	if a.ActiveRequests != 1 || a.ActivePrefillTokens != 16 || b1.ActiveRequests != 1 || b1.ActivePrefillTokens != 0 || b1.ActiveBlocks != 1+63 {
		t.Fatalf("after the second move: a %+v, b/1 %+v", a, b1)
	}
	for _, bad := range []struct {
		id     uint64
		worker string
		rank   uint32
	}{{1, "ghost", 0}, {1, "b", 7}, {42, "a", 0}} {
		h.s.Served(h.now, bad.id, bad.worker, bad.rank)
	}
	if b1 := h.rank("b", 1); b1.ActiveRequests != 1 {
		t.Fatalf("an ignored Served moved the booking: %+v", b1)
	}
	h.release(1)
	h.finish(9)
	h.s.byID["b"].ranks[1].blocks--
	for _, rs := range h.s.Stats().Ranks {
		if rs.ActiveRequests != 0 || rs.ActivePrefillTokens != 0 || rs.ActiveBlocks != 0 {
			t.Fatalf("rank %+v holds load after every request ended", rs)
		}
	}
}

// fleetCycle submits one request to a fleet of single-rank workers and
// ends it.
func fleetCycle(tb testing.TB, s *Scheduler, i uint64) {
	r := Request{ID: i, Model: "m", Priority: PriorityDefault, ISL: 512}
	if acts := s.Submit(simT0, r); len(acts) != 1 || acts[0].Kind != ActionDispatch {
		tb.Fatalf("submit %d: %v", i, simRender(acts))
	}
	s.Release(simT0, i)
}

func fleet(tb testing.TB, fallbacks, workers int) *Scheduler {
	ws := make([]Worker, workers)
	for i := range ws {
		ws[i] = Worker{ID: fmt.Sprintf("w%d", i)}
	}
	s, err := New(Config{Start: simT0, Fallbacks: fallbacks}, ws)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkScheduler_Fallbacks measures a Submit+Done cycle over 64
// workers without fallbacks and with 2 (one more pass over the workers).
func BenchmarkScheduler_Fallbacks(b *testing.B) {
	for _, n := range []int{0, 2} {
		b.Run(fmt.Sprintf("fallbacks=%d", n), func(b *testing.B) {
			s := fleet(b, n, 64)
			i := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				i++
				fleetCycle(b, s, i)
			}
		})
	}
}

func TestFallbacks_SteadyStateAllocations(t *testing.T) {
	if simRaceEnabled {
		t.Skip("the race detector allocates")
	}
	s := fleet(t, 2, 64)
	i := uint64(0)
	for range 1000 {
		i++
		fleetCycle(t, s, i)
	}
	if n := testing.AllocsPerRun(1000, func() { i++; fleetCycle(t, s, i) }); n != 0 {
		t.Errorf("%v allocations per Submit+Done with fallbacks, want 0", n)
	}
}
