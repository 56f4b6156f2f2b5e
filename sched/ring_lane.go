package sched

import "cmp"

// lane is one heap of queued entries inside a class: the class's shared lane
// or the exact lane of one (worker, rank). An exact lane is either ready
// (in its class's ready heap, pos >= 0) or blocked (in its class's and its
// worker's blocked lists, bpos and wpos >= 0). The shared lane is neither:
// its head is tested afresh on every arbitration.
type lane struct {
	key   laneKey
	class int
	h     indexedHeap[*entry] // the entries, without fairness
	fs    *flowSet            // the flows, with fairness; h stays empty
	pos   int                 // index in the class's ready heap, or -1
	bpos  int                 // index in the class's blocked list, or -1
	wpos  int                 // index in the ring's blocked list for key.worker, or -1
}

// head returns the lane's next entry, the best one or, with fairness, the
// head of the flow DRR serves next; the lane must not be empty.
func (l *lane) head() *entry {
	if l.fs != nil {
		return l.fs.head()
	}
	return l.h[0]
}

// size returns the number of entries in the lane.
func (l *lane) size() int {
	if l.fs != nil {
		return l.fs.n
	}
	return len(l.h)
}

// add queues e in the lane.
func (l *lane) add(fr *fairness, e *entry) {
	if l.fs != nil {
		l.fs.add(fr, e)
		return
	}
	l.h.push(e)
}

// del takes the queued e out of the lane.
func (l *lane) del(fr *fairness, e *entry) {
	if l.fs != nil {
		l.fs.del(fr, e)
		return
	}
	l.h.removeAt(e.q.heapIndex)
}

// refix restores the lane's order after e's queue key changed.
func (l *lane) refix(e *entry) {
	if l.fs != nil {
		l.fs.refix(e)
		return
	}
	l.h.fix(e.q.heapIndex)
}

// readyLane is one slot of a class's ready heap: a ready exact lane and a
// copy of its head's key, so that sifting compares contiguous memory
// instead of chasing two pointers per comparison.
type readyLane struct {
	k sortKey
	l *lane
}

// before orders ready lanes by their heads' keys, then worker id, then rank.
func (s readyLane) before(o readyLane) bool {
	if c := s.k.compare(o.k); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(s.l.key.worker, o.l.key.worker); c != 0 {
		return c < 0
	}
	return s.l.key.rank < o.l.key.rank
}

// setPos records the lane's index in its class's ready heap.
func (s readyLane) setPos(i int) { s.l.pos = i }

// class is one policy class of the ring: its lanes, DRR deficit and the
// incrementally kept statistics of its queued entries.
type drrClass struct {
	quantum uint64
	deficit uint64

	shared lane
	lanes  map[laneKey]*lane      // exact lanes, each non-empty
	ready  indexedHeap[readyLane] // exact lanes not known to be blocked
	// blocked holds exact lanes whose head was last found not dispatchable.
	blocked []*lane
	// gen is the ring's recheck generation last applied to blocked.
	gen uint64

	n           int    // queued entries
	isl, cached uint64 // sums of the queued entries' isl and cached
}

// newLane returns an empty exact lane for key in class ci, from the pool
// when possible.
func (r *ring) newLane(ci int, key laneKey) *lane {
	var l *lane
	if n := len(r.free); n > 0 {
		l = r.free[n-1]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
	} else {
		l = new(lane)
	}
	l.key, l.class = key, ci
	l.pos, l.bpos, l.wpos = -1, -1, -1
	if r.fair != nil {
		l.fs = l.fs.reset(r.classes[ci].quantum)
	}
	return l
}

// dropLane deletes the emptied exact lane l from class c and pools it.
func (r *ring) dropLane(c *drrClass, l *lane) {
	switch {
	case l.pos >= 0:
		c.ready.removeAt(l.pos)
	case l.bpos >= 0:
		r.unlist(c, l)
	}
	delete(c.lanes, l.key)
	if len(r.free) < maxPooledLanes {
		l.key = laneKey{}
		if cap(l.h) > maxPooledLaneCap {
			l.h = nil
		}
		r.free = append(r.free, l)
	}
}

// Lane pool bounds: enough for steady churn across many workers without
// retaining the memory of a past burst.
const (
	maxPooledLanes   = 1024
	maxPooledLaneCap = 64
)

// block moves the ready lane l of class c to the blocked lists.
func (r *ring) block(c *drrClass, l *lane) {
	c.ready.removeAt(l.pos)
	l.bpos = len(c.blocked)
	c.blocked = append(c.blocked, l)
	ws, ok := r.blockedBy[l.key.worker]
	if !ok {
		if n := len(r.spare); n > 0 {
			ws = r.spare[n-1]
			r.spare[n-1] = nil
			r.spare = r.spare[:n-1]
		}
	}
	l.wpos = len(ws)
	r.blockedBy[l.key.worker] = append(ws, l)
}

// unblock moves the blocked lane l of class c back to the ready heap, so
// that its head is tested again when it becomes the best ready lane.
func (r *ring) unblock(c *drrClass, l *lane) {
	r.unlist(c, l)
	c.makeReady(l)
}

// makeReady adds the lane l, not ready, to c's ready heap.
func (c *drrClass) makeReady(l *lane) { c.ready.push(readyLane{k: l.head().sortKey(), l: l}) }

// headChanged restores the place of the ready lane l after its head or
// the head's key changed.
func (c *drrClass) headChanged(l *lane) {
	c.ready[l.pos].k = l.head().sortKey()
	c.ready.fix(l.pos)
}

// unlist takes the blocked lane l off its class's and worker's lists.
func (r *ring) unlist(c *drrClass, l *lane) {
	unlistClass(c, l)
	ws := r.blockedBy[l.key.worker]
	last := len(ws) - 1
	if m := ws[last]; m != l {
		ws[l.wpos] = m
		m.wpos = l.wpos
	}
	ws[last] = nil
	l.wpos = -1
	if last == 0 {
		delete(r.blockedBy, l.key.worker)
		r.spare = append(r.spare, ws[:0])
		return
	}
	r.blockedBy[l.key.worker] = ws[:last]
}

// unlistClass takes the blocked lane l off its class's blocked list only.
func unlistClass(c *drrClass, l *lane) {
	last := len(c.blocked) - 1
	if m := c.blocked[last]; m != l {
		c.blocked[l.bpos] = m
		m.bpos = l.bpos
	}
	c.blocked[last] = nil
	c.blocked = c.blocked[:last]
	l.bpos = -1
}

// releaseBlocked moves every blocked lane of c back to the ready heap
// (a global recheck applied lazily).
func (r *ring) releaseBlocked(c *drrClass) {
	for len(c.blocked) > 0 {
		r.unblock(c, c.blocked[len(c.blocked)-1])
	}
}
