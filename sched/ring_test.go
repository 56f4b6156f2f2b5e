package sched

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// ringFixture drives a ring with hand-built entries.
type ringFixture struct {
	t     testing.TB
	r     *ring
	names []string
	seq   uint64
}

func newRingFixture(t testing.TB, specs ...ClassSpec) *ringFixture {
	t.Helper()
	f := &ringFixture{t: t, r: newRing(specs)}
	for _, s := range specs {
		f.names = append(f.names, s.Name)
	}
	return f
}

func quantumSpec(name string, quantum uint64) ClassSpec {
	return ClassSpec{Name: name, Quantum: quantum}
}

type entryOpt func(*entry)

func pinTo(worker string, rank uint32) entryOpt {
	return func(e *entry) { e.lane = laneKey{worker: worker, rank: rank} }
}
func withTier(s uint64) entryOpt   { return func(e *entry) { e.strict = s } }
func withScore(s float64) entryOpt { return func(e *entry) { e.score = s } }
func withPromoted() entryOpt       { return func(e *entry) { e.promoted = true } }
func withSnapshot(isl, cached uint64) entryOpt {
	return func(e *entry) { e.isl, e.cached = isl, cached }
}

// push queues an entry of class ci with the given cost; ids and seqs count
// up from 1.
func (f *ringFixture) push(ci int, cost uint64, opts ...entryOpt) *entry {
	f.t.Helper()
	f.seq++
	e := &entry{id: f.seq, seq: f.seq, class: ci, cost: cost, isl: cost}
	for _, o := range opts {
		o(e)
	}
	f.r.push(e)
	checkRing(f.t, f.r)
	return e
}

func (f *ringFixture) pushN(ci int, costs ...uint64) {
	f.t.Helper()
	for _, c := range costs {
		f.push(ci, c)
	}
}

// pop pops once and returns the winner's class name ("-" for none).
func (f *ringFixture) pop(ok func(*entry) bool) (string, *entry) {
	f.t.Helper()
	e := f.r.pop(ok)
	checkRing(f.t, f.r)
	if e == nil {
		return "-", nil
	}
	if e.q.lane != nil {
		f.t.Fatalf("popped entry %d still linked to a lane", e.id)
	}
	return f.names[e.class], e
}

func (f *ringFixture) deficits() []uint64 {
	d := make([]uint64, f.r.numClasses())
	for i := range d {
		d[i] = f.r.deficit(i)
	}
	return d
}

func (f *ringFixture) ids(es ...*entry) []uint64 {
	var out []uint64
	for _, e := range es {
		if e == nil {
			out = append(out, 0)
			continue
		}
		out = append(out, e.id)
	}
	return out
}

// popIDs pops n times and returns the popped ids (0 for none).
func (f *ringFixture) popIDs(n int, ok func(*entry) bool) []uint64 {
	f.t.Helper()
	var out []uint64
	for range n {
		_, e := f.pop(ok)
		out = append(out, f.ids(e)...)
	}
	return out
}

func popAll(*entry) bool  { return true }
func popNone(*entry) bool { return false }

// busy returns a predicate under which exact lanes of the named workers,
// and the listed entries, are not dispatchable.
func blockWorkers(workers []string, entries ...*entry) func(*entry) bool {
	return func(e *entry) bool {
		if slices.Contains(entries, e) {
			return false
		}
		return !e.lane.exact() || !slices.Contains(workers, e.lane.worker)
	}
}

// counting wraps ok and counts its calls.
func countCalls(ok func(*entry) bool, n *int) func(*entry) bool {
	return func(e *entry) bool { *n++; return ok(e) }
}

// checkRing verifies every structural invariant of r and fails t on the
// first violation.
func checkRing(t testing.TB, r *ring) {
	t.Helper()
	if err := ringInvariants(r); err != nil {
		t.Fatal(err)
	}
}

func ringInvariants(r *ring) error {
	total, blocked := 0, 0
	for ci := range r.classes {
		c := &r.classes[ci]
		var n int
		var isl, cached uint64
		count := func(l *lane) error {
			if err := laneInvariants(ci, l); err != nil {
				return err
			}
			for _, e := range laneEntries(l) {
				n++
				isl += e.isl
				cached += e.cached
			}
			return nil
		}
		if c.shared.key.exact() || c.shared.pos != -1 || c.shared.bpos != -1 || c.shared.class != ci {
			return fmt.Errorf("class %d: shared lane header corrupted: %+v", ci, c.shared)
		}
		if err := count(&c.shared); err != nil {
			return err
		}
		for k, l := range c.lanes {
			if l.key != k || !k.exact() {
				return fmt.Errorf("class %d: lane %v stored under key %v", ci, l.key, k)
			}
			if l.size() == 0 {
				return fmt.Errorf("class %d: empty lane %v not deleted", ci, k)
			}
			if (l.pos >= 0) == (l.bpos >= 0) {
				return fmt.Errorf("class %d: lane %v is ready=%v blocked=%v", ci, k, l.pos >= 0, l.bpos >= 0)
			}
			if l.pos >= 0 && (l.pos >= len(c.ready) || c.ready[l.pos].l != l) {
				return fmt.Errorf("class %d: lane %v ready position %d wrong", ci, k, l.pos)
			}
			if l.bpos >= 0 {
				if l.bpos >= len(c.blocked) || c.blocked[l.bpos] != l {
					return fmt.Errorf("class %d: lane %v blocked position %d wrong", ci, k, l.bpos)
				}
				ws := r.blockedBy[k.worker]
				if l.wpos < 0 || l.wpos >= len(ws) || ws[l.wpos] != l {
					return fmt.Errorf("class %d: lane %v worker position %d wrong", ci, k, l.wpos)
				}
			} else if l.wpos != -1 {
				return fmt.Errorf("class %d: ready lane %v has worker position %d", ci, k, l.wpos)
			}
			if err := count(l); err != nil {
				return err
			}
		}
		if len(c.ready)+len(c.blocked) != len(c.lanes) {
			return fmt.Errorf("class %d: %d ready + %d blocked lanes, want %d", ci, len(c.ready), len(c.blocked), len(c.lanes))
		}
		for i, s := range c.ready {
			if l := s.l; l.pos != i || c.lanes[l.key] != l {
				return fmt.Errorf("class %d: ready heap slot %d holds stray lane %v", ci, i, l.key)
			}
			if s.k != s.l.head().sortKey() {
				return fmt.Errorf("class %d: ready lane %v has a stale head key", ci, s.l.key)
			}
			if i > 0 && s.before(c.ready[(i-1)/2]) {
				return fmt.Errorf("class %d: ready heap order broken at %d", ci, i)
			}
		}
		for _, l := range c.blocked {
			if c.lanes[l.key] != l {
				return fmt.Errorf("class %d: blocked list holds stray lane %v", ci, l.key)
			}
		}
		blocked += len(c.blocked)
		if got, gi, gc := r.classStats(ci); got != uint64(n) || gi != isl || gc != cached || c.n != n {
			return fmt.Errorf("class %d: stats (%d, %d, %d) n=%d, recount (%d, %d, %d)", ci, got, gi, gc, c.n, n, isl, cached)
		}
		if n == 0 && c.deficit != 0 {
			return fmt.Errorf("class %d: empty with deficit %d", ci, c.deficit)
		}
		total += n
	}
	if total != r.len() {
		return fmt.Errorf("len %d, recount %d", r.len(), total)
	}
	listed := 0
	for w, ws := range r.blockedBy {
		if len(ws) == 0 {
			return fmt.Errorf("empty blocked list kept for worker %q", w)
		}
		for _, l := range ws {
			if l.key.worker != w || l.bpos < 0 {
				return fmt.Errorf("worker %q blocked list holds lane %v (bpos %d)", w, l.key, l.bpos)
			}
		}
		listed += len(ws)
	}
	if listed != blocked {
		return fmt.Errorf("%d lanes in worker blocked lists, %d in class lists", listed, blocked)
	}
	if r.carry < -1 || r.carry >= len(r.classes) || (len(r.classes) > 0 && (r.cursor < 0 || r.cursor >= len(r.classes))) {
		return fmt.Errorf("carry %d cursor %d out of range", r.carry, r.cursor)
	}
	return nil
}

func laneInvariants(ci int, l *lane) error {
	if l.class != ci {
		return fmt.Errorf("class %d: lane %v says class %d", ci, l.key, l.class)
	}
	if l.fs != nil {
		return flowSetInvariants(ci, l)
	}
	for i, e := range l.h {
		if e.q.lane != l || e.q.heapIndex != i || e.class != ci || e.lane != l.key {
			return fmt.Errorf("class %d lane %v: entry %d misfiled (lane %v, index %d, class %d, key %v)",
				ci, l.key, e.id, e.q.lane != nil, e.q.heapIndex, e.class, e.lane)
		}
		if i > 0 && e.before(l.h[(i-1)/2]) {
			return fmt.Errorf("class %d lane %v: heap order broken at %d", ci, l.key, i)
		}
	}
	return nil
}

// popStep is one expected arbitration: the winning class ("-" for none)
// and every class's deficit afterwards.
type popStep struct {
	class    string
	deficits []uint64
}

func TestRing_DispatchSequences(t *testing.T) {
	tests := []struct {
		name    string
		classes []ClassSpec
		backlog [][]uint64 // costs queued per class, in arrival order
		want    []popStep
	}{
		{
			// Quantum per round, not per request: one grant pays three
			// requests, then the cursor moves on.
			name:    "quantum 10 pays costs 3,3,3 then advances",
			classes: []ClassSpec{quantumSpec("a", 10), quantumSpec("b", 10)},
			backlog: [][]uint64{{3, 3, 3, 3, 3}, {3, 3, 3, 3}},
			want: []popStep{
				{"a", []uint64{7, 0}},
				{"a", []uint64{4, 0}},
				{"a", []uint64{1, 0}},
				{"b", []uint64{1, 7}}, // a's next cost 3 > 1: cursor advances
				{"b", []uint64{1, 4}},
				{"b", []uint64{1, 1}},
				{"a", []uint64{8, 1}}, // a's visit: 1 + 10 - 3
				{"a", []uint64{0, 1}}, // a empties: deficit resets
				{"b", []uint64{0, 0}}, // b: 1 + 10 - 3, empties
				{"-", []uint64{0, 0}},
			},
		},
		{
			// The documented bulk-credit example: 4 virtual rounds.
			name:    "bulk credit for oversized heads",
			classes: []ClassSpec{quantumSpec("standard", 1000), quantumSpec("latency", 2000)},
			backlog: [][]uint64{{7000, 7000}, {9000, 9000}},
			want: []popStep{
				{"latency", []uint64{5000, 1000}},
				{"standard", []uint64{0, 5000}}, // one more virtual round
				{"latency", []uint64{2000, 0}},
				{"standard", []uint64{0, 0}},
				{"-", []uint64{0, 0}},
			},
		},
		{
			name:    "exact quantum ratio 1:3 for equal costs",
			classes: []ClassSpec{quantumSpec("one", 1), quantumSpec("three", 3)},
			backlog: [][]uint64{sameCosts(1, 10), sameCosts(1, 10)},
			want: []popStep{
				{"one", []uint64{0, 0}},
				{"three", []uint64{0, 2}},
				{"three", []uint64{0, 1}},
				{"three", []uint64{0, 0}},
				{"one", []uint64{0, 0}},
				{"three", []uint64{0, 2}},
				{"three", []uint64{0, 1}},
				{"three", []uint64{0, 0}},
			},
		},
		{
			name:    "premium 512 regular 128 at cost 512",
			classes: []ClassSpec{quantumSpec("premium", 512), quantumSpec("regular", 128)},
			backlog: [][]uint64{sameCosts(512, 20), sameCosts(512, 20)},
			want: []popStep{
				{"premium", []uint64{0, 0}},
				{"premium", []uint64{0, 128}},
				{"premium", []uint64{0, 256}},
				{"premium", []uint64{0, 384}},
				{"regular", []uint64{0, 0}},
				{"premium", []uint64{0, 0}},
				{"premium", []uint64{0, 128}},
				{"premium", []uint64{0, 256}},
				{"premium", []uint64{0, 384}},
				{"regular", []uint64{0, 0}},
			},
		},
		{
			// Both classes need 2^40-1 virtual rounds; a wins the final
			// scan and b keeps its bulk credit for the next call.
			name:    "cost far above quantum; the final-scan loser keeps bulk credit",
			classes: []ClassSpec{quantumSpec("a", 1), quantumSpec("b", 3)},
			backlog: [][]uint64{{1 << 40, 1}, {3 << 40}},
			want: []popStep{
				{"a", []uint64{0, 3 << 40}},
				{"b", []uint64{0, 0}},
				{"a", []uint64{0, 0}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRingFixture(t, tt.classes...)
			for ci, costs := range tt.backlog {
				f.pushN(ci, costs...)
			}
			for i, step := range tt.want {
				got, _ := f.pop(popAll)
				if d := f.deficits(); got != step.class || !slices.Equal(d, step.deficits) {
					t.Fatalf("pop %d: got %s %v, want %s %v", i+1, got, d, step.class, step.deficits)
				}
			}
		})
	}
}

func sameCosts(cost uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = cost
	}
	return out
}

func TestRing_PremiumRegularSteadyPattern(t *testing.T) {
	f := newRingFixture(t, quantumSpec("premium", 512), quantumSpec("regular", 128))
	f.pushN(0, sameCosts(512, 400)...)
	f.pushN(1, sameCosts(512, 400)...)
	var b strings.Builder
	for range 500 {
		b.WriteByte(f.names[f.r.pop(popAll).class][0])
	}
	checkRing(t, f.r)
	if want := strings.Repeat("ppppr", 100); b.String() != want {
		t.Fatalf("dispatch pattern\n got %s\nwant %s", b.String(), want)
	}
}

func TestRing_CarryUsesNextDispatchableLane(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 10))
	a1 := f.push(0, 3, pinTo("w1", 0))
	f.push(0, 3, pinTo("w1", 0))
	a3 := f.push(0, 3, pinTo("w2", 0))
	b1 := f.push(1, 3)

	if _, e := f.pop(popAll); e != a1 || !slices.Equal(f.deficits(), []uint64{7, 0}) {
		t.Fatalf("pop 1: got %v %v, want a1 [7 0]", f.ids(e), f.deficits())
	}
	// w1 turns busy: a's carry look takes its next dispatchable lane, w2,
	// and pays from the kept credit before b is visited.
	w1busy := blockWorkers([]string{"w1"})
	if _, e := f.pop(w1busy); e != a3 || !slices.Equal(f.deficits(), []uint64{4, 0}) {
		t.Fatalf("pop 2: got %v %v, want a3 [4 0]", f.ids(e), f.deficits())
	}
	// Only the blocked w1 lane is left in a: it keeps its credit, earns
	// nothing, and b is served.
	if _, e := f.pop(w1busy); e != b1 || !slices.Equal(f.deficits(), []uint64{4, 0}) {
		t.Fatalf("pop 3: got %v %v, want b1 [4 0]", f.ids(e), f.deficits())
	}
	calls := 0
	if _, e := f.pop(countCalls(w1busy, &calls)); e != nil || calls != 0 || !slices.Equal(f.deficits(), []uint64{4, 0}) {
		t.Fatalf("pop 4: got %v %v after %d predicate calls, want none [4 0] after 0", f.ids(e), f.deficits(), calls)
	}
	f.r.recheckWorker("w1")
	if got, _ := f.pop(popAll); got != "a" || !slices.Equal(f.deficits(), []uint64{0, 0}) {
		t.Fatalf("pop 5: got %s %v, want a [0 0]", got, f.deficits())
	}
}

func TestRing_CarryFailsOnUnaffordableNextCandidate(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 10))
	a1 := f.push(0, 3, pinTo("w1", 0))
	f.push(0, 3, pinTo("w1", 0)) // affordable, but blocked when the carry looks
	a3 := f.push(0, 9, pinTo("w2", 0))
	b1 := f.push(1, 3)
	w1busy := blockWorkers([]string{"w1"})
	want := []struct {
		e   *entry
		def []uint64
	}{
		{a1, []uint64{7, 0}},
		{b1, []uint64{7, 0}}, // carry look: a3 costs 9 > 7; the ring serves b
		{a3, []uint64{8, 0}}, // a's visit: 7 + 10 - 9
	}
	for i, w := range want {
		ok := popAll
		if i > 0 {
			ok = w1busy
		}
		if _, e := f.pop(ok); e != w.e || !slices.Equal(f.deficits(), w.def) {
			t.Fatalf("pop %d: got %v %v, want %v %v", i+1, f.ids(e), f.deficits(), f.ids(w.e), w.def)
		}
	}
}

func TestRing_CarryCandidateIsEvaluatedAtTheNextPop(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 10))
	a1 := f.push(0, 3)
	f.push(0, 3)
	b1 := f.push(1, 3)
	if _, e := f.pop(popAll); e != a1 {
		t.Fatalf("pop 1: got %v, want a1", f.ids(e))
	}
	// A costly higher-tier arrival is a's head when the carry looks.
	f.push(0, 100, withTier(1))
	if _, e := f.pop(popAll); e != b1 || !slices.Equal(f.deficits(), []uint64{7, 0}) {
		t.Fatalf("pop 2: got %v %v, want b1 [7 0]", f.ids(e), f.deficits())
	}
}

func TestRing_BlockedRingEarnsNothing(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 5), quantumSpec("b", 7), quantumSpec("c", 1))
	f.pushN(0, 3, 3, 3)
	f.push(1, 50, pinTo("w1", 0))
	f.push(1, 50)
	f.push(2, 1, pinTo("w2", 3))
	if got, _ := f.pop(popAll); got != "a" {
		t.Fatalf("setup pop: got %s, want a", got)
	}
	want := f.deficits()
	if !slices.Equal(want, []uint64{2, 0, 0}) {
		t.Fatalf("setup deficits %v, want [2 0 0]", want)
	}
	for i := range 10_000 {
		if e := f.r.pop(popNone); e != nil {
			t.Fatalf("call %d: popped %d from a fully blocked ring", i, e.id)
		}
	}
	checkRing(t, f.r)
	if got := f.deficits(); !slices.Equal(got, want) {
		t.Fatalf("deficits after 10000 blocked calls %v, want %v", got, want)
	}
	if f.r.len() != 5 {
		t.Fatalf("len %d, want 5", f.r.len())
	}
}

func TestRing_BlockedClassKeepsDeficitWhileOthersRun(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 4))
	a1 := f.push(0, 3, pinTo("w1", 0))
	f.push(0, 3, pinTo("w1", 0))
	f.pushN(1, sameCosts(4, 20)...)
	if _, e := f.pop(popAll); e != a1 {
		t.Fatalf("pop 1: got %v, want a1", f.ids(e))
	}
	for i := range 20 {
		got, _ := f.pop(blockWorkers([]string{"w1"}))
		if got != "b" || f.r.deficit(0) != 7 {
			t.Fatalf("pop %d: got %s, a's deficit %d; want b and 7", i+2, got, f.r.deficit(0))
		}
	}
}

func TestRing_TenThousandLanesHalfBlocked(t *testing.T) {
	for _, cost := range []uint64{1, 1_000_000} {
		t.Run(fmt.Sprintf("cost %d quantum 1", cost), func(t *testing.T) {
			r := newRing([]ClassSpec{quantumSpec("only", 1)})
			var blocked []string
			for i := range 10_000 {
				w := fmt.Sprintf("w%05d", i)
				if i%2 == 1 {
					blocked = append(blocked, w)
				}
				r.push(&entry{id: uint64(i + 1), seq: uint64(i + 1), cost: cost, lane: laneKey{worker: w}})
			}
			calls := 0
			ok := countCalls(func(e *entry) bool { _, found := slices.BinarySearch(blocked, e.lane.worker); return !found }, &calls)
			for i := range 5_000 {
				e := r.pop(ok)
				if e == nil || (e.id-1)%2 != 0 {
					t.Fatalf("pop %d: got %v, want a free lane's entry", i+1, e)
				}
			}
			if e := r.pop(ok); e != nil {
				t.Fatalf("pop 5001: got %v, want nil", e)
			}
			if calls > 10_000 {
				t.Fatalf("draining 5000 of 10000 lanes called the predicate %d times, want <= 10000", calls)
			}
			calls = 0
			for range 100 {
				if e := r.pop(ok); e != nil || calls != 0 {
					t.Fatalf("pop on blocked lanes: got %v after %d calls, want nil after 0", e, calls)
				}
			}
			checkRing(t, r)
			r.recheckAll()
			calls = 0
			for range 5_000 {
				if r.pop(countCalls(popAll, &calls)) == nil {
					t.Fatal("released lane not dispatched after recheckAll")
				}
			}
			if calls != 5_000 || r.len() != 0 {
				t.Fatalf("after recheckAll: %d calls, %d left; want 5000 and 0", calls, r.len())
			}
			if len(r.free) != maxPooledLanes {
				t.Fatalf("%d lanes pooled after deleting 10000, want the cap %d", len(r.free), maxPooledLanes)
			}
			for _, l := range r.free {
				if len(l.h) != 0 || l.key.exact() || slices.ContainsFunc(l.h[:cap(l.h)], func(e *entry) bool { return e != nil }) {
					t.Fatal("a pooled lane still references entries")
				}
			}
			checkRing(t, r)
		})
	}
}

func TestRing_HeadOfLineIsLaneLocal(t *testing.T) {
	t.Run("blocked exact lane does not hold back another lane", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, pinTo("w1", 0))
		x := f.push(0, 1, pinTo("w2", 0))
		if _, e := f.pop(blockWorkers([]string{"w1"})); e != x {
			t.Fatalf("got %v, want %d", f.ids(e), x.id)
		}
	})
	t.Run("blocked exact lane does not hold back the shared head", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, pinTo("w1", 0))
		x := f.push(0, 1)
		if _, e := f.pop(blockWorkers([]string{"w1"})); e != x {
			t.Fatalf("got %v, want %d", f.ids(e), x.id)
		}
	})
	t.Run("blocked shared head holds back the shared lane only", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		s1 := f.push(0, 1)
		f.push(0, 1)
		x := f.push(0, 1, pinTo("w1", 0))
		ok := blockWorkers(nil, s1)
		if _, e := f.pop(ok); e != x {
			t.Fatalf("got %v, want the exact head %d", f.ids(e), x.id)
		}
		if _, e := f.pop(ok); e != nil {
			t.Fatalf("got %v past a blocked shared head, want none", f.ids(e))
		}
	})
	t.Run("no lookahead past a blocked shared head without exact lanes", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		s1 := f.push(0, 1)
		f.push(0, 1)
		if _, e := f.pop(blockWorkers(nil, s1)); e != nil {
			t.Fatalf("got %v, want none", f.ids(e))
		}
	})
	t.Run("an exact lane does not look past its blocked head", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		x1 := f.push(0, 1, pinTo("w1", 0))
		f.push(0, 1, pinTo("w1", 0))
		if _, e := f.pop(blockWorkers(nil, x1)); e != nil {
			t.Fatalf("got %v, want none", f.ids(e))
		}
	})
}

func TestRing_SharedVersusExactHead(t *testing.T) {
	t.Run("shared head strictly better wins", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		s := f.push(0, 1)
		f.push(0, 1, pinTo("w1", 0))
		if got := f.popIDs(1, popAll); got[0] != s.id {
			t.Fatalf("got %v, want shared %d", got, s.id)
		}
	})
	t.Run("exact head better wins", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1)
		x := f.push(0, 1, pinTo("w1", 0), withTier(1))
		if got := f.popIDs(1, popAll); got[0] != x.id {
			t.Fatalf("got %v, want exact %d", got, x.id)
		}
	})
	t.Run("equal keys go to the exact head", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		s := &entry{id: 1, seq: 7, cost: 1}
		x := &entry{id: 2, seq: 7, cost: 1, lane: laneKey{worker: "w1"}}
		f.r.push(s)
		f.r.push(x)
		if got := f.popIDs(2, popAll); !slices.Equal(got, []uint64{2, 1}) {
			t.Fatalf("got %v, want [2 1]", got)
		}
	})
}

func TestRing_OrderWithinAClass(t *testing.T) {
	t.Run("strict tier beats a large score", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, withScore(10_000))
		high := f.push(0, 1, withTier(1))
		if got := f.popIDs(1, popAll); got[0] != high.id {
			t.Fatalf("got %v, want %d", got, high.id)
		}
	})
	t.Run("score then arrival order", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, withScore(1))  // 1
		f.push(0, 1, withScore(2))  // 2
		f.push(0, 1, withScore(1))  // 3
		f.push(0, 1, withScore(-1)) // 4
		f.push(0, 1, pinTo("w", 0)) // 5: score 0
		if got := f.popIDs(5, popAll); !slices.Equal(got, []uint64{2, 1, 3, 5, 4}) {
			t.Fatalf("got %v, want [2 1 3 5 4]", got)
		}
	})
	t.Run("promoted entry sorts above every tier", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, withTier(9))
		p := f.push(0, 1, withPromoted())
		if got := f.popIDs(1, popAll); got[0] != p.id {
			t.Fatalf("got %v, want promoted %d", got, p.id)
		}
	})
	t.Run("fix after promotion reorders lanes and the lane index", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, withTier(9))                 // 1 shared
		f.push(0, 1, pinTo("w1", 0), withTier(5)) // 2
		x := f.push(0, 1, pinTo("w2", 0))         // 3
		y := f.push(0, 1, pinTo("w1", 0))         // 4: behind 2 in w1
		for _, e := range []*entry{y, x} {
			e.promoted = true
			f.r.fix(e)
			checkRing(t, f.r)
		}
		if got := f.popIDs(4, popAll); !slices.Equal(got, []uint64{3, 4, 1, 2}) {
			t.Fatalf("got %v, want [3 4 1 2]", got)
		}
	})
	t.Run("lane ties break by worker then rank", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		for i, k := range []laneKey{{"b", 0}, {"a", 1}, {"a", 0}} {
			f.r.push(&entry{id: uint64(i + 1), seq: 1, cost: 1, lane: k})
		}
		if got := f.popIDs(3, popAll); !slices.Equal(got, []uint64{3, 2, 1}) {
			t.Fatalf("got %v, want [3 2 1]", got)
		}
	})
}

func TestRing_Remove(t *testing.T) {
	type setup struct {
		f                  *ringFixture
		s1, s2, s3, x1, x2 *entry
		y1                 *entry
	}
	build := func(t *testing.T) setup {
		f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 10))
		var s setup
		s.f = f
		s.s1 = f.push(0, 3, withSnapshot(10, 7))
		s.s2 = f.push(0, 3, withSnapshot(20, 17))
		s.s3 = f.push(0, 3, withSnapshot(30, 27))
		s.x1 = f.push(0, 3, pinTo("w1", 0), withSnapshot(40, 37))
		s.x2 = f.push(0, 3, pinTo("w1", 0), withSnapshot(50, 47))
		s.y1 = f.push(0, 3, pinTo("w2", 1), withSnapshot(60, 57))
		f.push(1, 3)
		return s
	}
	tests := []struct {
		name    string
		remove  func(s setup) []*entry
		order   []uint64 // class a's pops afterwards
		isl     uint64
		lanesOf int
	}{
		{"shared head", func(s setup) []*entry { return []*entry{s.s1} }, []uint64{2, 3, 4, 5, 6}, 200, 2},
		{"shared non-head", func(s setup) []*entry { return []*entry{s.s3} }, []uint64{1, 2, 4, 5, 6}, 180, 2},
		{"exact head", func(s setup) []*entry { return []*entry{s.x1} }, []uint64{1, 2, 3, 5, 6}, 170, 2},
		{"exact non-head", func(s setup) []*entry { return []*entry{s.x2} }, []uint64{1, 2, 3, 4, 6}, 160, 2},
		{"last entry of a lane", func(s setup) []*entry { return []*entry{s.y1} }, []uint64{1, 2, 3, 4, 5}, 150, 1},
		{"twice is a no-op", func(s setup) []*entry { return []*entry{s.y1, s.y1} }, []uint64{1, 2, 3, 4, 5}, 150, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := build(t)
			var isl, cached uint64 = 210, 210 - 6*3
			for i, e := range tt.remove(s) {
				if i == 0 {
					isl -= e.isl
					cached -= e.cached
				}
				s.f.r.remove(e)
				checkRing(t, s.f.r)
				if e.q.lane != nil {
					t.Fatalf("removed entry %d still linked", e.id)
				}
			}
			if n, gi, gc := s.f.r.classStats(0); n != 5 || gi != isl || gc != cached || gi != tt.isl {
				t.Fatalf("stats (%d, %d, %d), want (5, %d, %d)", n, gi, gc, tt.isl, cached)
			}
			if got := len(s.f.r.classes[0].lanes); got != tt.lanesOf {
				t.Fatalf("%d exact lanes, want %d", got, tt.lanesOf)
			}
			var got []uint64
			for range len(tt.order) {
				if c, e := s.f.pop(popAll); c == "a" {
					got = append(got, e.id)
				} else {
					got = append(got, s.f.popIDs(1, popAll)...)
				}
			}
			if !slices.Equal(got, tt.order) {
				t.Fatalf("class a order %v, want %v", got, tt.order)
			}
		})
	}
}

func TestRing_RemoveResetsDeficitOfEmptiedClass(t *testing.T) {
	f := newRingFixture(t, quantumSpec("a", 10), quantumSpec("b", 10))
	f.push(0, 3)
	x := f.push(0, 3, pinTo("w1", 0))
	y := f.push(0, 3, pinTo("w2", 0))
	f.push(1, 3)
	f.pop(popAll)
	f.pop(blockWorkers([]string{"w2"})) // a's carry: w2 blocked, w1 dispatched
	if d := f.r.deficit(0); d != 4 || x.q.lane != nil {
		t.Fatalf("setup: deficit %d, x queued %v; want 4, false", d, x.q.lane != nil)
	}
	f.r.remove(y) // the last entry, in a blocked lane
	checkRing(t, f.r)
	if d, n := f.r.deficit(0), f.r.classLen(0); d != 0 || n != 0 || len(f.r.blockedBy) != 0 {
		t.Fatalf("after remove: deficit %d len %d blocked workers %d, want 0 0 0", d, n, len(f.r.blockedBy))
	}
	if got, _ := f.pop(popAll); got != "b" {
		t.Fatalf("next pop: got %s, want b", got)
	}
}

func TestRing_Recheck(t *testing.T) {
	t.Run("a blocked lane is tested once until rechecked", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, pinTo("w1", 0), withTier(1))
		f.pushN(0, sameCosts(1, 10)...)
		calls := 0
		w1 := 0
		ok := countCalls(func(e *entry) bool {
			if e.lane.worker == "w1" {
				w1++
				return false
			}
			return true
		}, &calls)
		f.popIDs(5, ok)
		if w1 != 1 {
			t.Fatalf("blocked lane tested %d times over 5 pops, want 1", w1)
		}
		f.r.recheckWorker("w9") // another worker: no effect
		f.popIDs(1, ok)
		f.r.recheckWorker("w1")
		f.popIDs(1, ok)
		f.r.recheckAll()
		f.popIDs(2, ok)
		if w1 != 3 {
			t.Fatalf("blocked lane tested %d times, want 3 (once, then once per recheck)", w1)
		}
	})
	t.Run("recheckWorker releases every class and rank of the worker", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1), quantumSpec("b", 1))
		f.push(0, 1, pinTo("w1", 0))
		f.push(1, 1, pinTo("w1", 1))
		f.push(1, 1, pinTo("w2", 0))
		f.pop(popNone)
		if got := len(f.r.blockedBy["w1"]); got != 2 {
			t.Fatalf("w1 has %d blocked lanes, want 2", got)
		}
		f.r.recheckWorker("w1")
		checkRing(t, f.r)
		if len(f.r.blockedBy) != 1 || len(f.r.blockedBy["w2"]) != 1 {
			t.Fatalf("blocked lists after recheck: %v", f.r.blockedBy)
		}
		if got := f.popIDs(3, blockWorkers([]string{"w2"})); !slices.Equal(got, []uint64{1, 2, 0}) {
			t.Fatalf("got %v, want [1 2 0]", got)
		}
	})
	t.Run("push into a blocked lane leaves it blocked", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		f.push(0, 1, pinTo("w1", 0))
		f.pop(popNone)
		x := f.push(0, 1, pinTo("w1", 0), withTier(3))
		if got := f.popIDs(1, popAll); got[0] != 0 {
			t.Fatalf("got %v before a recheck, want none", got)
		}
		f.r.recheckAll()
		if got := f.popIDs(1, popAll); got[0] != x.id {
			t.Fatalf("got %v after recheckAll, want %d", got, x.id)
		}
	})
	t.Run("removing a blocked head releases the lane", func(t *testing.T) {
		f := newRingFixture(t, quantumSpec("a", 1))
		x1 := f.push(0, 1, pinTo("w1", 0))
		x2 := f.push(0, 1, pinTo("w1", 0))
		f.pop(popNone)
		f.r.remove(x1)
		checkRing(t, f.r)
		if got := f.popIDs(1, popAll); got[0] != x2.id {
			t.Fatalf("got %v, want %d", got, x2.id)
		}
	})
}

func TestRing_ZeroAllocSteadyState(t *testing.T) {
	r := newRing([]ClassSpec{quantumSpec("a", 100), quantumSpec("b", 300)})
	es := make([]*entry, 64)
	var seq uint64
	for i := range es {
		seq++
		es[i] = &entry{id: seq, seq: seq, class: i % 2, cost: uint64(50 + i), lane: laneKey{worker: fmt.Sprintf("w%d", i%8)}}
		if i%3 == 0 {
			es[i].lane = laneKey{}
		}
		r.push(es[i])
	}
	ok := func(e *entry) bool { return e.lane.worker != "w7" }
	allocs := testing.AllocsPerRun(1000, func() {
		e := r.pop(ok)
		if e == nil {
			r.recheckAll()
			return
		}
		seq++
		e.seq = seq
		r.push(e)
	})
	if allocs != 0 {
		t.Fatalf("steady-state push+pop allocates %.1f times per op, want 0", allocs)
	}
	checkRing(t, r)
}
