package sched

// This file implements Dynamo's PolicyQueue (policy_queue.rs, pop_next):
// one Deficit Round Robin ring of policy classes.
//
// Structure. The ring holds C classes in profile order. Each class has a
// shared lane (unpinned entries) and one exact lane per pinned (worker,
// rank); every lane is an indexed binary heap ordered by the queue key
// (promoted, strict desc, score desc, seq asc). The exact lanes of a class
// are either ready, in an indexed heap of lanes ordered by their heads' keys
// (copied into the heap slots) then worker id then rank, or blocked: their
// head was found not dispatchable and they are skipped, without being
// tested, until recheckWorker or recheckAll releases them back to the ready
// heap, where they are tested again when they next come to the top. Blocked
// lanes are listed per class and per worker, with their positions, so every
// move is O(1) or O(log L). Emptied exact lanes are deleted and their
// structs pooled.
//
// Complexity, with n queued entries in the affected lane, L exact lanes in
// the class and C classes:
//
//   - push, remove, fix: O(log n + log L).
//   - recheckWorker: O(k log L) for the k blocked lanes of that worker;
//     recheckAll: O(1), each class paying O(B log L) for its B blocked
//     lanes at its next candidate evaluation.
//   - pop: O(C + T log L), where T is the number of exact lane heads tested
//     in this call. A lane head found blocked leaves the ready heap, so each
//     lane is tested at most once per release; T is bounded by the ready
//     lanes. Bulk virtual rounds make the call independent of cost/quantum.
//   - len, classLen, classStats, deficit: O(1).
//
// Fairness (opt-in, ring_flow.go): every lane then holds one flow per
// fairness key instead of one heap, and its head is the head of the flow
// DRR between the flows serves next; the ring treats the lane exactly as
// above. push, remove and fix then cost O(log n + log F + log L) for F
// flows in the lane, and a dispatch charges the winning flow.
//
// Steady-state push and pop allocate nothing: lane heaps, the candidate
// scratch slice, blocked lists and (a bounded pool of) lane structs are
// reused.
//
// DRR invariants: quantum is granted only at a ring visit or through bulk
// rounds, and only to a class whose candidate can dispatch; a class with no
// queued entry has deficit 0; a deficit stays below quantum plus the
// largest cost queued in its class since it was last empty; the cost is
// charged in full at pop and never refunded. Deficit arithmetic saturates; the statistics are exact
// sums (modular, so every subtraction undoes its addition).

import "math"

// queueLinks is the ring's per-entry bookkeeping.
type queueLinks struct {
	heapIndex int   // index in the lane heap (or flow heap, with fairness)
	lane      *lane // the lane holding the entry, nil when not queued
	flow      *flow // the flow holding the entry, with fairness
}

// ring holds one DRR ring of policy classes (one model's queue). Each class
// has a shared lane and one lane per exact (worker, rank). It implements
// Dynamo's PolicyQueue: see the comment at the top of this file. A ring is
// not safe for concurrent use.
type ring struct {
	classes []drrClass
	cursor  int    // first class of the next ring scan
	carry   int    // class given the first look on the next pop, or -1
	n       int    // queued entries
	gen     uint64 // recheck generation, bumped by recheckAll

	blockedBy map[string][]*lane // blocked exact lanes per worker, all classes
	spare     [][]*lane          // emptied blockedBy lists for reuse
	free      []*lane            // pooled lane structs
	cand      []*lane            // per-class candidate lanes of the current pop
	fair      *fairness          // nil without fairness (ring_flow.go)
}

// newRing returns a ring with one empty class per spec, in order. A zero
// quantum (rejected by profile validation) is treated as 1.
func newRing(specs []ClassSpec) *ring {
	r := &ring{
		classes:   make([]drrClass, len(specs)),
		carry:     -1,
		blockedBy: make(map[string][]*lane),
		cand:      make([]*lane, len(specs)),
	}
	for i, s := range specs {
		c := &r.classes[i]
		c.quantum = max(s.Quantum, 1)
		c.shared = lane{class: i, pos: -1, bpos: -1, wpos: -1}
		c.lanes = make(map[laneKey]*lane)
	}
	return r
}

// enableFairness turns on flows in every lane (ring_flow.go). It must be
// called on an empty ring, before the first push.
func (r *ring) enableFairness(cfg *FairnessConfig) {
	if r.fair = newFairness(cfg); r.fair == nil {
		return
	}
	for i := range r.classes {
		c := &r.classes[i]
		c.shared.fs = newFlowSet(c.quantum)
	}
}

// push adds e (key, class, lane, cost, isl, cached already set) to its lane.
// A new head of a ready exact lane updates the lane's place; pushing into a
// blocked lane leaves it blocked until a recheck. It panics if e is already
// queued, which would be a scheduler bug.
func (r *ring) push(e *entry) {
	if e.q.lane != nil {
		panic("sched: push of an entry that is already queued")
	}
	c := &r.classes[e.class]
	l, fresh := &c.shared, false
	if e.lane.exact() {
		if l = c.lanes[e.lane]; l == nil {
			l, fresh = r.newLane(e.class, e.lane), true
			c.lanes[e.lane] = l
		}
	}
	var old *entry
	if !fresh && l.size() > 0 {
		old = l.head()
	}
	e.q.lane = l
	l.add(r.fair, e)
	switch {
	case fresh:
		c.makeReady(l)
	case l.pos >= 0 && l.head() != old:
		c.headChanged(l)
	}
	c.n++
	r.n++
	c.isl += e.isl
	c.cached += e.cached
}

// retest releases e's exact lane when the lane is blocked and e is its
// head, so that the head is tested at the next pop. push leaves such a lane
// blocked, as Dynamo does: its predicate gives the same answer for every
// entry of a lane. The scheduler's slot gate does not (it depends on the
// head's priority class), so the scheduler calls this after a push.
func (r *ring) retest(e *entry) {
	if l := e.q.lane; l != nil && l.bpos >= 0 && (l.head() == e || l.fs != nil) {
		r.unblock(&r.classes[l.class], l)
	}
}

// remove takes a queued e out in O(log n), leaving no trace; an emptied
// class's deficit resets to 0 and an emptied exact lane is deleted. If e
// headed a blocked lane, the lane is released so its new head is tested. An
// entry that is not queued is ignored.
func (r *ring) remove(e *entry) {
	l := e.q.lane
	if l == nil {
		return
	}
	c := &r.classes[l.class]
	r.take(c, l, e)
	if c.n == 0 {
		c.deficit = 0
	}
}

// fix restores order after e's key changed (starvation promotion). If e is
// or was the head of a blocked lane, the lane is released so the head is
// tested again. An entry that is not queued is ignored.
func (r *ring) fix(e *entry) {
	l := e.q.lane
	if l == nil {
		return
	}
	old := l.head()
	l.refix(e)
	if !l.key.exact() || (old != e && l.head() == old) {
		return
	}
	c := &r.classes[l.class]
	if l.pos >= 0 {
		c.headChanged(l)
	} else {
		r.unblock(c, l)
	}
}

// take removes the queued e from lane l of class c and from the counters.
func (r *ring) take(c *drrClass, l *lane, e *entry) {
	old := l.head()
	l.del(r.fair, e)
	e.q.lane = nil
	c.n--
	r.n--
	c.isl -= e.isl
	c.cached -= e.cached
	switch {
	case !l.key.exact():
	case l.size() == 0:
		r.dropLane(c, l)
	case l.head() == old: // the head is unchanged
	case l.pos >= 0:
		c.headChanged(l)
	default: // a blocked lane's new head deserves a test
		r.unblock(c, l)
	}
}

// pop runs one DRR arbitration (Dynamo's pop_next) and removes and returns
// the winning entry, or nil when no class has a dispatchable candidate.
// dispatchable is called on lane heads, possibly more than once per entry;
// it must not modify the ring.
func (r *ring) pop(dispatchable func(*entry) bool) *entry {
	if r.n == 0 {
		r.carry = -1
		return nil
	}
	nc := len(r.classes)

	// Carry check: the previous winner spends the credit it kept, with no
	// new quantum, if its next dispatchable candidate is affordable now.
	carry := r.carry
	r.carry = -1
	if carry >= 0 {
		c := &r.classes[carry]
		l := r.candidate(carry, dispatchable)
		r.cand[carry] = l
		switch {
		case l != nil && l.head().cost <= c.deficit:
			return r.dispatch(carry, l)
		case l == nil && c.n == 0:
			c.deficit = 0
		}
	}

	// One ring scan from the cursor; quantum only for classes with a
	// candidate.
	for j := range nc {
		i := (r.cursor + j) % nc
		c := &r.classes[i]
		l := r.cand[i]
		if i != carry {
			l = r.candidate(i, dispatchable)
			r.cand[i] = l
		}
		if l == nil {
			if c.n == 0 {
				c.deficit = 0
			}
			continue
		}
		cost := l.head().cost
		if cost <= c.deficit {
			return r.dispatch(i, l)
		}
		c.deficit = satAdd(c.deficit, c.quantum)
		if cost <= c.deficit {
			return r.dispatch(i, l)
		}
	}

	// Bulk virtual rounds: the fewest whole rounds after which some class
	// can pay, granted to every class with a candidate.
	rounds, found := uint64(math.MaxUint64), false
	for i, l := range r.cand {
		if l != nil {
			c := &r.classes[i]
			rounds = min(rounds, ceilDiv(l.head().cost-c.deficit, c.quantum))
			found = true
		}
	}
	if !found {
		return nil
	}
	for i, l := range r.cand {
		if l != nil {
			c := &r.classes[i]
			c.deficit = satAdd(c.deficit, satMul(c.quantum, rounds))
		}
	}

	// Final scan from the cursor. Classes that became affordable but lose
	// keep their bulk credit.
	for j := range nc {
		i := (r.cursor + j) % nc
		if l := r.cand[i]; l != nil && l.head().cost <= r.classes[i].deficit {
			return r.dispatch(i, l)
		}
	}
	return nil // unreachable: the class that set rounds can now pay
}

// candidate returns class ci's candidate lane (Dynamo's next_dispatchable):
// the better of the dispatchable shared head and the best ready exact lane
// whose head is dispatchable, the shared head winning only if strictly
// better. Exact lanes whose head is not dispatchable move to the blocked
// lists. It returns nil when the class has no dispatchable head.
func (r *ring) candidate(ci int, dispatchable func(*entry) bool) *lane {
	c := &r.classes[ci]
	if c.n == 0 {
		return nil
	}
	if len(c.lanes) == 0 {
		if c.shared.size() > 0 && dispatchable(c.shared.head()) {
			return &c.shared
		}
		return nil
	}
	if c.gen != r.gen {
		r.releaseBlocked(c)
		c.gen = r.gen
	}
	var shared *lane
	if c.shared.size() > 0 && dispatchable(c.shared.head()) {
		shared = &c.shared
	}
	for len(c.ready) > 0 {
		l := c.ready[0].l
		if dispatchable(l.head()) {
			if shared != nil && compareKey(shared.head(), l.head()) < 0 {
				return shared
			}
			return l
		}
		r.block(c, l)
	}
	return shared
}

// dispatch pops the head of class ci's candidate lane l and does the
// bookkeeping of Dynamo's pop_candidate: the cursor passes the winner, the
// cost is charged, and the winner keeps the first look on the next pop
// when it still has credit and entries.
func (r *ring) dispatch(ci int, l *lane) *entry {
	c := &r.classes[ci]
	e := l.head()
	r.cursor = (ci + 1) % len(r.classes)
	if l.fs != nil {
		l.fs.charge(e)
	}
	r.take(c, l, e)
	c.deficit = satSub(c.deficit, e.cost)
	switch {
	case c.n == 0:
		c.deficit = 0
	case c.deficit > 0:
		r.carry = ci
	}
	return e
}

// recheckWorker releases the blocked lanes of worker (every rank, every
// class) so their heads are tested again when next considered.
func (r *ring) recheckWorker(worker string) {
	ws, ok := r.blockedBy[worker]
	if !ok {
		return
	}
	delete(r.blockedBy, worker)
	for i, l := range ws {
		c := &r.classes[l.class]
		unlistClass(c, l)
		l.wpos = -1
		c.makeReady(l)
		ws[i] = nil
	}
	r.spare = append(r.spare, ws[:0])
}

// recheckAll marks every blocked lane for re-evaluation. Each class applies
// the mark lazily at its next candidate evaluation.
func (r *ring) recheckAll() { r.gen++ }

// len returns the number of queued entries.
func (r *ring) len() int { return r.n }

// numClasses returns the number of classes in the ring.
func (r *ring) numClasses() int { return len(r.classes) }

// classLen returns the number of entries queued in class i.
func (r *ring) classLen(i int) int { return r.classes[i].n }

// deficit returns class i's DRR deficit.
func (r *ring) deficit(i int) uint64 { return r.classes[i].deficit }

// classStats returns class i's queued requests and the sums of their raw
// ISL and cached-token snapshots (the inputs of the per-worker limits).
func (r *ring) classStats(i int) (requests, islTokens, cachedTokens uint64) {
	c := &r.classes[i]
	return uint64(c.n), c.isl, c.cached
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// ceilDiv returns ⌈a/b⌉ for b > 0 without overflow.
func ceilDiv(a, b uint64) uint64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
