package sched

// laneKey names a lane inside a policy class: the shared lane (zero value)
// or the exact (worker, rank) lane of pinned requests.
type laneKey struct {
	worker string // empty for the shared lane
	rank   uint32
}

// exact reports whether this is an exact-worker lane.
func (k laneKey) exact() bool { return k.worker != "" }

// entry is one request inside the scheduler, queued or in flight. Entries
// are pooled by the scheduler.
type entry struct {
	id uint64

	// Queue key, set before ring.push and fixed while queued except through
	// ring.fix. Order: promoted first, then strict desc, score desc, seq asc.
	promoted bool
	strict   uint32
	score    float64
	seq      uint64
	cost     uint64 // scheduling_cost = max(1, uncached)
	class    int    // index in the ring
	lane     laneKey

	// Cost snapshot, kept by the ring's per-class stats.
	isl    uint64
	cached uint64

	// q is owned by ring.go: heap position and lane links.
	q queueLinks

	// The remaining fields are owned by scheduler.go.
}
