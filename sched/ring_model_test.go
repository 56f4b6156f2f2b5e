package sched

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ringModel is a direct, unoptimised transcription of Dynamo's pop_next and
// next_dispatchable: it keeps every class's queued entries in a flat slice
// and recomputes every lane head by scanning, with no blocked-lane cache.
// With a predicate whose answer for an exact lane changes only through a
// recheck, the ring must match it step for step.
type ringModel struct {
	quantum, deficit []uint64
	queued           [][]*entry
	cursor, carry    int
	n                int
}

func newRingModel(specs []ClassSpec) *ringModel {
	m := &ringModel{carry: -1}
	for _, s := range specs {
		m.quantum = append(m.quantum, s.Quantum)
		m.deficit = append(m.deficit, 0)
		m.queued = append(m.queued, nil)
	}
	return m
}

func (m *ringModel) push(e *entry) {
	m.queued[e.class] = append(m.queued[e.class], e)
	m.n++
}

func (m *ringModel) remove(e *entry) {
	q := m.queued[e.class]
	i := slices.Index(q, e)
	if i < 0 {
		return
	}
	m.queued[e.class] = slices.Delete(q, i, i+1)
	m.n--
	if len(m.queued[e.class]) == 0 {
		m.deficit[e.class] = 0
	}
}

func (m *ringModel) candidate(ci int, ok func(*entry) bool) *entry {
	var shared *entry
	heads := map[laneKey]*entry{}
	for _, e := range m.queued[ci] {
		if !e.lane.exact() {
			if shared == nil || compareKey(e, shared) < 0 {
				shared = e
			}
			continue
		}
		if h := heads[e.lane]; h == nil || compareKey(e, h) < 0 {
			heads[e.lane] = e
		}
	}
	if shared != nil && !ok(shared) {
		shared = nil
	}
	var hs []*entry
	for _, h := range heads {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *entry) int {
		if c := compareKey(a, b); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lane.worker, b.lane.worker); c != 0 {
			return c
		}
		return cmp.Compare(a.lane.rank, b.lane.rank)
	})
	for _, h := range hs {
		if ok(h) {
			if shared != nil && compareKey(shared, h) < 0 {
				return shared
			}
			return h
		}
	}
	return shared
}

func (m *ringModel) pop(ok func(*entry) bool) *entry {
	if m.n == 0 {
		m.carry = -1
		return nil
	}
	nc := len(m.quantum)
	cand := make([]*entry, nc)
	carry := m.carry
	m.carry = -1
	if carry >= 0 {
		cand[carry] = m.candidate(carry, ok)
		if e := cand[carry]; e != nil && e.cost <= m.deficit[carry] {
			return m.dispatch(e)
		}
		if cand[carry] == nil && len(m.queued[carry]) == 0 {
			m.deficit[carry] = 0
		}
	}
	for j := range nc {
		i := (m.cursor + j) % nc
		if i != carry {
			cand[i] = m.candidate(i, ok)
		}
		e := cand[i]
		if e == nil {
			if len(m.queued[i]) == 0 {
				m.deficit[i] = 0
			}
			continue
		}
		if e.cost <= m.deficit[i] {
			return m.dispatch(e)
		}
		m.deficit[i] = satAdd(m.deficit[i], m.quantum[i])
		if e.cost <= m.deficit[i] {
			return m.dispatch(e)
		}
	}
	rounds := uint64(math.MaxUint64)
	for i, e := range cand {
		if e != nil {
			rounds = min(rounds, ceilDiv(e.cost-m.deficit[i], m.quantum[i]))
		}
	}
	if !slices.ContainsFunc(cand, func(e *entry) bool { return e != nil }) {
		return nil
	}
	for i, e := range cand {
		if e != nil {
			m.deficit[i] = satAdd(m.deficit[i], satMul(m.quantum[i], rounds))
		}
	}
	for j := range nc {
		i := (m.cursor + j) % nc
		if e := cand[i]; e != nil && e.cost <= m.deficit[i] {
			return m.dispatch(e)
		}
	}
	panic("model: no class affordable after bulk rounds")
}

func (m *ringModel) dispatch(e *entry) *entry {
	ci := e.class
	m.cursor = (ci + 1) % len(m.quantum)
	q := m.queued[ci]
	i := slices.Index(q, e)
	m.queued[ci] = slices.Delete(q, i, i+1)
	m.n--
	m.deficit[ci] = satSub(m.deficit[ci], e.cost)
	switch {
	case len(m.queued[ci]) == 0:
		m.deficit[ci] = 0
	case m.deficit[ci] > 0:
		m.carry = ci
	}
	return e
}

// ringHarness applies one operation stream to a ring (and, in model mode, to
// a ringModel) and checks every invariant after each step.
type ringHarness struct {
	t       testing.TB
	specs   []ClassSpec
	r       *ring
	m       *ringModel // nil when the predicate is random
	live    []*entry
	maxCost []uint64 // largest cost queued per class since it was last empty
	busy    map[string]bool
	stuck   map[*entry]bool // shared entries that are not dispatchable
	seq     uint64
	rng     *rand.Rand // drives the random predicate
	ok      func(*entry) bool
	steps   int
	// keys > 0 gives each pushed entry one of that many fairness keys
	// (for a ring with fairness on); key is the next one.
	keys int
	key  string
}

var (
	harnessWorkers = []string{"w0", "w1", "w2", "w3", "w4"}
	harnessKeys    = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
)

func newRingHarness(t testing.TB, specs []ClassSpec, withModel bool, rng *rand.Rand) *ringHarness {
	h := &ringHarness{
		t: t, specs: specs, r: newRing(specs), busy: map[string]bool{}, stuck: map[*entry]bool{},
		maxCost: make([]uint64, len(specs)), rng: rng,
	}
	if withModel {
		h.m = newRingModel(specs)
		// An exact lane's answer depends only on its worker, whose changes
		// to free are announced by a recheck; shared heads are tested
		// afresh on every call, so they may depend on the entry.
		h.ok = func(e *entry) bool {
			if e.lane.exact() {
				return !h.busy[e.lane.worker]
			}
			return !h.stuck[e]
		}
	} else {
		h.ok = func(*entry) bool { return h.rng.IntN(3) != 0 }
	}
	return h
}

var harnessScores = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, math.Inf(1), math.Inf(-1), math.NaN(), 1e-300, -2.5}

func (h *ringHarness) push(ci int, exact bool, worker int, rank uint32, cost uint64, strict uint32, score int, cached uint64) {
	h.seq++
	e := &entry{
		id: h.seq, seq: h.seq, class: ci, cost: max(cost, 1), strict: uint64(strict),
		score: harnessScores[score%len(harnessScores)], isl: cost + cached, cached: cached,
		flowKey: h.key,
	}
	if exact {
		e.lane = laneKey{worker: harnessWorkers[worker%len(harnessWorkers)], rank: rank}
	}
	h.maxCost[ci] = max(h.maxCost[ci], e.cost)
	h.r.push(e)
	if h.m != nil {
		h.m.push(e)
	}
	h.live = append(h.live, e)
	h.check("push")
}

func (h *ringHarness) remove(i int) {
	if len(h.live) == 0 {
		return
	}
	e := h.live[i%len(h.live)]
	before := h.deficits()
	h.r.remove(e)
	if h.m != nil {
		h.m.remove(e)
	}
	h.drop(e)
	for ci, d := range h.deficits() {
		if d != before[ci] && (d != 0 || h.r.classLen(ci) != 0) {
			h.t.Fatalf("step %d: remove changed class %d deficit %d -> %d", h.steps, ci, before[ci], d)
		}
	}
	h.check("remove")
}

func (h *ringHarness) promote(i int) {
	if len(h.live) == 0 {
		return
	}
	e := h.live[i%len(h.live)]
	e.promoted = !e.promoted // demotion exercises fix in the other direction
	h.r.fix(e)
	h.check("fix")
}

func (h *ringHarness) pop() {
	before := h.deficits()
	got := h.r.pop(h.ok)
	if h.m != nil {
		want := h.m.pop(h.ok)
		if got != want {
			h.t.Fatalf("step %d: pop returned %s, model %s", h.steps, entryName(got), entryName(want))
		}
	}
	if got == nil {
		if d := h.deficits(); !slices.Equal(d, before) {
			h.t.Fatalf("step %d: pop with no candidate changed deficits %v -> %v", h.steps, before, d)
		}
	} else {
		if got.q.lane != nil {
			h.t.Fatalf("step %d: popped entry %d still linked", h.steps, got.id)
		}
		h.drop(got)
		for ci, d := range h.deficits() {
			if ci != got.class && d < before[ci] {
				h.t.Fatalf("step %d: class %d lost credit %d -> %d while %d won", h.steps, ci, before[ci], d, got.class)
			}
		}
	}
	h.check("pop")
}

func (h *ringHarness) toggleBusy(w int, global bool) {
	name := harnessWorkers[w%len(harnessWorkers)]
	h.busy[name] = !h.busy[name]
	if !h.busy[name] {
		if global {
			h.r.recheckAll()
		} else {
			h.r.recheckWorker(name)
		}
	}
	h.check("busy")
}

func (h *ringHarness) toggleStuck(i int) {
	if len(h.live) == 0 {
		return
	}
	e := h.live[i%len(h.live)]
	if !e.lane.exact() {
		h.stuck[e] = !h.stuck[e]
	}
}

func (h *ringHarness) drop(e *entry) {
	i := slices.Index(h.live, e)
	if i < 0 {
		h.t.Fatalf("step %d: entry %d left the ring twice", h.steps, e.id)
	}
	h.live = slices.Delete(h.live, i, i+1)
	delete(h.stuck, e)
}

func (h *ringHarness) deficits() []uint64 {
	d := make([]uint64, h.r.numClasses())
	for i := range d {
		d[i] = h.r.deficit(i)
	}
	return d
}

func entryName(e *entry) string {
	if e == nil {
		return "none"
	}
	return fmt.Sprintf("entry %d (class %d lane %v)", e.id, e.class, e.lane)
}

// check verifies the ring's structure, that the live entries are exactly
// the queued ones, each in one lane, the deficit bound, and the model.
func (h *ringHarness) check(op string) {
	h.t.Helper()
	h.steps++
	if err := ringInvariants(h.r); err != nil {
		h.t.Fatalf("step %d (%s): %v", h.steps, op, err)
	}
	if h.r.len() != len(h.live) {
		h.t.Fatalf("step %d (%s): ring holds %d, want %d", h.steps, op, h.r.len(), len(h.live))
	}
	seen := map[*entry]int{}
	for ci := range h.r.classes {
		c := &h.r.classes[ci]
		for _, e := range laneEntries(&c.shared) {
			seen[e]++
		}
		for _, l := range c.lanes {
			for _, e := range laneEntries(l) {
				seen[e]++
			}
		}
		if limit := c.quantum + h.maxCost[ci]; c.deficit >= limit {
			h.t.Fatalf("step %d (%s): class %d deficit %d not below quantum + max cost %d", h.steps, op, ci, c.deficit, limit)
		}
		if c.n == 0 {
			h.maxCost[ci] = 0 // the bound restarts when the class empties
		}
	}
	for _, e := range h.live {
		if seen[e] != 1 {
			h.t.Fatalf("step %d (%s): entry %d found in %d lanes", h.steps, op, e.id, seen[e])
		}
	}
	if h.m != nil {
		if d := h.deficits(); !slices.Equal(d, h.m.deficit) || h.r.cursor != h.m.cursor || h.r.carry != h.m.carry {
			h.t.Fatalf("step %d (%s): deficits %v cursor %d carry %d, model %v %d %d",
				h.steps, op, d, h.r.cursor, h.r.carry, h.m.deficit, h.m.cursor, h.m.carry)
		}
	}
}

// apply decodes one operation from next and applies it.
func (h *ringHarness) apply(next func() uint64) {
	switch op := next() % 16; {
	case op < 6:
		exact := next()%2 == 0
		cost := next() % 64
		if next()%4 == 0 {
			cost *= 1 << (next() % 24) // oversized heads
		}
		if h.keys > 0 {
			h.key = harnessKeys[next()%uint64(min(h.keys, len(harnessKeys)))]
		}
		h.push(int(next()%uint64(len(h.specs))), exact, smallIndex(next()), uint32(next()%2), cost,
			uint32(next()%3), smallIndex(next()), next()%100)
	case op < 8:
		h.remove(smallIndex(next()))
	case op < 9:
		h.promote(smallIndex(next()))
	case op < 14:
		h.pop()
	case op < 15:
		h.toggleBusy(smallIndex(next()), next()%3 == 0)
	default:
		h.toggleStuck(smallIndex(next()))
	}
}

// small maps a random word to a non-negative index.
func smallIndex(x uint64) int { return int(x % 4096) }

func randomRingSpecs(rng *rand.Rand) []ClassSpec {
	specs := make([]ClassSpec, 1+rng.IntN(4))
	for i := range specs {
		specs[i] = quantumSpec(fmt.Sprintf("c%d", i), 1+rng.Uint64N(200))
	}
	return specs
}

var ringSeed = flag.Uint64("ring.seed", 0, "run the random ring tests with this seed only")

// seeds returns n fresh seeds, or only the -ring.seed value when set.
func ringSeeds(n int) []uint64 {
	if *ringSeed != 0 {
		return []uint64{*ringSeed}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = rand.Uint64()
	}
	return out
}

func TestRing_RandomAgainstModel(t *testing.T) {
	for _, seed := range ringSeeds(40) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			h := newRingHarness(t, randomRingSpecs(rng), true, rng)
			for range 1500 {
				h.apply(rng.Uint64)
			}
			for h.r.len() > 0 { // drain: nothing may stay stuck once all is free
				clear(h.busy)
				clear(h.stuck)
				h.r.recheckAll()
				h.pop()
			}
		})
	}
}

func TestRing_RandomPredicateInvariants(t *testing.T) {
	for _, seed := range ringSeeds(20) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			h := newRingHarness(t, randomRingSpecs(rng), false, rng)
			for range 2000 {
				h.apply(rng.Uint64)
			}
		})
	}
}

func TestRing_LongRunTokenShare(t *testing.T) {
	seed := ringSeeds(1)[0]
	rng := rand.New(rand.NewPCG(seed, 2))
	specs := []ClassSpec{quantumSpec("big", 2048), quantumSpec("mid", 512), quantumSpec("small", 128)}
	r := newRing(specs)
	var seq uint64
	// requeue gives e a fresh arrival with a mixed size (mostly small, some
	// far above every quantum) in a random lane of class ci.
	requeue := func(e *entry, ci int) {
		seq++
		*e = entry{id: seq, seq: seq, class: ci, cost: 1 + rng.Uint64N(600), strict: uint64(rng.IntN(2))}
		if rng.IntN(5) == 0 {
			e.cost = 1 + rng.Uint64N(8000)
		}
		if rng.IntN(3) == 0 {
			e.lane = laneKey{worker: harnessWorkers[rng.IntN(len(harnessWorkers))]}
		}
		r.push(e)
	}
	for ci := range specs {
		for range 8 {
			requeue(new(entry), ci)
		}
	}
	served := make([]uint64, len(specs))
	for range 40_000 {
		e := r.pop(popAll)
		served[e.class] += e.cost
		requeue(e, e.class) // every class stays backlogged
	}
	checkRing(t, r)
	var total, quanta uint64
	for ci, s := range specs {
		total += served[ci]
		quanta += s.Quantum
	}
	for ci, s := range specs {
		got := float64(served[ci]) / float64(total)
		want := float64(s.Quantum) / float64(quanta)
		if math.Abs(got-want) > 0.02*want {
			t.Errorf("seed %d: class %s served %.5f of tokens, want %.5f ± 2%%", seed, s.Name, got, want)
		}
	}
}

func FuzzRing(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{3, 0, 0, 0, 5, 0, 1, 0, 0, 0, 0, 0, 10, 14, 1, 0, 10, 7, 0, 10})
	f.Add([]byte("push and pop through exact lanes, blocked workers and rechecks"))
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		next := func() uint64 {
			if i >= len(data) {
				return 0
			}
			b := data[i]
			i++
			return uint64(b)
		}
		specs := make([]ClassSpec, 1+next()%4)
		for ci := range specs {
			specs[ci] = quantumSpec(fmt.Sprintf("c%d", ci), 1+next()%50)
		}
		h := newRingHarness(t, specs, true, nil)
		for i < len(data) {
			h.apply(next)
		}
	})
}
