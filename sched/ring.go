package sched

// queueLinks is the ring's per-entry bookkeeping (heap index and so on).
type queueLinks struct {
	heapIndex int
}

// ring holds one DRR ring of policy classes (one model's queue). Each class
// has a shared lane and one lane per exact (worker, rank). It implements
// Dynamo's PolicyQueue: see ../shared/reference/dynamo-policy-queues.md §5.
type ring struct{}

// newRing returns a ring with one empty class per spec, in order.
func newRing(specs []ClassSpec) *ring { panic("unimplemented") }

// push adds e (key, class, lane, cost, isl, cached already set) to its lane.
func (r *ring) push(e *entry) { panic("unimplemented") }

// remove takes a queued e out in O(log n), leaving no trace; an emptied
// class's deficit resets to 0.
func (r *ring) remove(e *entry) { panic("unimplemented") }

// fix restores order after e's key changed (starvation promotion).
func (r *ring) fix(e *entry) { panic("unimplemented") }

// pop runs one DRR arbitration and removes and returns the winning entry,
// or nil when no class has a dispatchable candidate.
func (r *ring) pop(dispatchable func(*entry) bool) *entry { panic("unimplemented") }

// recheckWorker marks the blocked lanes of worker for re-evaluation.
func (r *ring) recheckWorker(worker string) { panic("unimplemented") }

// recheckAll marks every blocked lane for re-evaluation on the next pop.
func (r *ring) recheckAll() { panic("unimplemented") }
