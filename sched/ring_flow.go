package sched

// This file implements flows inside a lane (fairness between tenants of one
// policy class). With fairness on, every lane of the ring keeps one
// sub-queue (a flow) per fairness key instead of one heap, and the lane's
// head is the head of the flow that Deficit Round Robin over the
// uncached-token cost serves next. Inside a flow the queue key (promoted,
// strict tier, FCFS or WSPT score, sequence) still orders the entries.
// Everything the ring does with a lane (test its head, block it, order the
// exact lanes of a class by their heads) is unchanged: head-of-line
// blocking stays local to the lane.
//
// DRR with computed rounds. Classic DRR visits the backlogged flows in a
// list: the flow at the front gets its quantum (class quantum × key weight)
// added to its deficit, is served while its head costs no more than the
// deficit, then goes to the tail; a flow that empties leaves the list and
// forgets its deficit; a new flow joins at the tail. Walking the list costs
// O(flows × cost/quantum) per dispatch. Here each backlogged flow instead
// carries the round of its next visit and a sequence number giving its
// place in the list, and the flows sit in an indexed heap ordered by
// (round, sequence). A flow that cannot pay its head at its next visit
// waits ⌈(cost − deficit)/quantum⌉ − 1 further rounds, credited in one step
// when it is served. The heap's top is exactly the flow classic DRR serves
// next, so push, remove and dispatch are O(log n + log F) for n entries in
// the flow and F flows, independent of cost/quantum, and allocate nothing
// in steady state (flows and their heaps are pooled).
//
// Bounds: a lane holds at most maxFlows flows; entries whose key would
// create one more share the lane's overflow flow. Flows exist only while
// they hold entries, so their number never exceeds the queued entries.

// DefaultMaxFlows is the number of flows per lane when
// FairnessConfig.MaxFlows is 0.
const DefaultMaxFlows = 1024

// Bounds of the fairness configuration.
const (
	// MaxFlowsLimit is the largest FairnessConfig.MaxFlows.
	MaxFlowsLimit = 1 << 16
	// MaxFlowWeight is the largest weight of a fairness key.
	MaxFlowWeight = 1000
)

// FairnessConfig turns on flows inside lanes: one sub-queue per fairness
// key, served by DRR over the uncached-token cost.
type FairnessConfig struct {
	// Enabled turns flows on; off, every lane is one FCFS/WSPT queue, as in
	// Dynamo.
	Enabled bool
	// MaxFlows bounds the flows of one lane; keys past it share one
	// overflow flow. 0 means DefaultMaxFlows.
	MaxFlows int
	// Weights gives a key a weight in [1, MaxFlowWeight] (default 1): its
	// quantum is the class quantum times its weight. The map is read, not
	// copied; it must not change while the scheduler runs.
	Weights map[string]uint32
}

// flow is one fairness key's sub-queue inside a lane.
type flow struct {
	key      string
	overflow bool // the lane's shared flow for keys past maxFlows
	h        indexedHeap[*entry]
	quantum  uint64 // class quantum × weight
	deficit  uint64
	// round is the round of the flow's next visit or, while serving, of the
	// visit in progress; seq is its place among the flows of a round.
	round, seq uint64
	// serving: the flow is being served at round, its quantum granted.
	serving bool
	pos     int    // index in the lane's flow heap
	served  uint64 // tokens dispatched since the flow became backlogged
	since   uint64 // the lane's round when the flow became backlogged
}

// flowSlot is one slot of a lane's flow heap: a backlogged flow and a copy
// of its visit key.
type flowSlot struct {
	round, seq uint64
	f          *flow
}

func (s flowSlot) before(o flowSlot) bool {
	if s.round != o.round {
		return s.round < o.round
	}
	return s.seq < o.seq
}

func (s flowSlot) setPos(i int) { s.f.pos = i }

// flowSet is the flows of one lane.
type flowSet struct {
	byKey    map[string]*flow // flows with entries, overflow excluded
	overflow *flow            // nil when empty
	heap     indexedHeap[flowSlot]
	quantum  uint64 // the class quantum
	round    uint64 // round of the last dispatch; never decreases
	seq      uint64 // last sequence number given
	n        int    // queued entries
	peak     int    // most flows held at once, for pooling
}

// fairness is a ring's shared fairness state: configuration and the pool of
// flow structs.
type fairness struct {
	maxFlows int
	weights  map[string]uint32
	free     []*flow
}

// Flow pool bounds, as for lanes.
const (
	maxPooledFlows   = 4096
	maxPooledFlowCap = 64
	maxPooledSetPeak = 64
)

// newFairness returns the ring state for cfg, or nil when fairness is off.
func newFairness(cfg *FairnessConfig) *fairness {
	if cfg == nil || !cfg.Enabled {
		return nil
	}
	m := cfg.MaxFlows
	if m <= 0 {
		m = DefaultMaxFlows
	}
	return &fairness{maxFlows: min(m, MaxFlowsLimit), weights: cfg.Weights}
}

func newFlowSet(quantum uint64) *flowSet {
	return &flowSet{byKey: make(map[string]*flow), quantum: quantum}
}

// head returns the entry DRR serves next; the set must not be empty.
func (fs *flowSet) head() *entry { return fs.heap[0].f.h[0] }

// visitRound is f's heap key: the round of the visit at which f can pay
// its head. A serving flow can (see normalize); otherwise f gets one
// quantum per visit from round on, and never a round already passed.
func (fs *flowSet) visitRound(f *flow) uint64 {
	if f.serving {
		return f.round
	}
	k := f.round
	if c := f.h[0].cost; c > f.deficit {
		k = satAdd(k, ceilDiv(c-f.deficit, f.quantum)-1)
	}
	return max(k, fs.round)
}

// normalize ends f's service when its deficit no longer pays its head: f
// keeps its credit and goes to the tail of the next round.
func (fs *flowSet) normalize(f *flow) {
	if f.serving && f.h[0].cost > f.deficit {
		f.serving = false
		f.round = satAdd(f.round, 1)
		fs.seq++
		f.seq = fs.seq
	}
}

// rekey restores f's place in the heap after its head or state changed.
func (fs *flowSet) rekey(f *flow) {
	fs.normalize(f)
	s := &fs.heap[f.pos]
	s.round, s.seq = fs.visitRound(f), f.seq
	fs.heap.fix(f.pos)
}

// add queues e in the flow of its key, creating the flow at the tail of
// the next round when the key has none.
func (fs *flowSet) add(fr *fairness, e *entry) {
	f := fs.byKey[e.flowKey]
	if f == nil {
		switch {
		case len(fs.byKey) < fr.maxFlows:
			f = fr.newFlow(fs, e.flowKey, false)
			fs.byKey[e.flowKey] = f
		case fs.overflow != nil:
			f = fs.overflow
		default:
			f = fr.newFlow(fs, "", true)
			fs.overflow = f
		}
		if len(f.h) == 0 {
			f.h.push(e)
			e.q.flow = f
			fs.heap.push(flowSlot{round: fs.visitRound(f), seq: f.seq, f: f})
			fs.n++
			fs.peak = max(fs.peak, len(fs.heap))
			return
		}
	}
	old := f.h[0]
	f.h.push(e)
	e.q.flow = f
	fs.n++
	if f.h[0] != old {
		fs.rekey(f)
	}
}

// newFlow returns an empty flow of fs from the pool, at the tail of the
// round after the last dispatch.
func (fr *fairness) newFlow(fs *flowSet, key string, overflow bool) *flow {
	var f *flow
	if n := len(fr.free); n > 0 {
		f = fr.free[n-1]
		fr.free[n-1] = nil
		fr.free = fr.free[:n-1]
	} else {
		f = new(flow)
	}
	w := uint64(1)
	if x, ok := fr.weights[key]; ok && !overflow {
		w = uint64(min(max(x, 1), MaxFlowWeight))
	}
	fs.seq++
	f.key, f.overflow = key, overflow
	f.quantum = satMul(fs.quantum, w)
	f.deficit, f.served, f.serving = 0, 0, false
	f.round, f.seq, f.since = satAdd(fs.round, 1), fs.seq, fs.round
	return f
}

// del takes the queued e out of its flow, dropping the flow when it
// empties (its deficit is forgotten, as in DRR).
func (fs *flowSet) del(fr *fairness, e *entry) {
	f := e.q.flow
	i := e.q.heapIndex
	f.h.removeAt(i)
	e.q.flow = nil
	fs.n--
	switch {
	case len(f.h) == 0:
		fs.heap.removeAt(f.pos)
		if f.overflow {
			fs.overflow = nil
		} else {
			delete(fs.byKey, f.key)
		}
		fr.release(f)
	case i == 0:
		fs.rekey(f)
	}
}

// refix restores order after e's queue key changed.
func (fs *flowSet) refix(e *entry) {
	f := e.q.flow
	old := f.h[0]
	f.h.fix(e.q.heapIndex)
	if f.h[0] != old || old == e {
		fs.rekey(f)
	}
}

// charge books the dispatch of e, the set's head: its flow is served at its
// visit round, getting the quanta of the rounds it waited, and pays e's cost.
func (fs *flowSet) charge(e *entry) {
	f := e.q.flow
	k := fs.heap[f.pos].round
	if !f.serving {
		f.deficit = satAdd(f.deficit, satMul(k-f.round+1, f.quantum))
		f.round, f.serving = k, true
	}
	f.deficit = satSub(f.deficit, e.cost)
	f.served = satAdd(f.served, e.cost)
	fs.round = k
}

// release pools the emptied flow f.
func (fr *fairness) release(f *flow) {
	f.key = ""
	if len(fr.free) >= maxPooledFlows {
		return
	}
	if cap(f.h) > maxPooledFlowCap {
		f.h = nil
	}
	fr.free = append(fr.free, f)
}

// reset readies a pooled lane's empty flow set for class quantum q; a set
// that once held many flows gives its map back.
func (fs *flowSet) reset(q uint64) *flowSet {
	if fs == nil || fs.peak > maxPooledSetPeak {
		return newFlowSet(q)
	}
	fs.quantum = q
	return fs
}
